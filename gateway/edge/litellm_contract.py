"""LiteLLM's client-facing texts and bodies (LiteLLM 1.108.7), shared by the hooks that run inside a
LiteLLM proxy and by Berth's discovering gateway, which honours the same contract without LiteLLM.

Standard library only: the LiteLLM venv imports it as `gateway.edge.litellm_contract` too."""

from __future__ import annotations

from typing import Any, Final

# auth_exception_handler._as_proxy_exception prefixes "Authentication Error, " to a plain exception's
# text; user_api_key_auth.py raises "No api key passed in." and "Invalid proxy server token passed".
NO_KEY_MESSAGE: Final = "Authentication Error, No api key passed in."
INVALID_KEY_MESSAGE: Final = "Authentication Error, Invalid proxy server token passed"
# proxy/route_llm_request.py, ProxyModelNotFoundError and _AVAILABLE_MODELS_HINT.
AVAILABLE_MODELS_HINT: Final = "Call `/v1/models` to view available models for your key."
# proxy_server.py model_list: every model card says provider "openai"; constants.py
# DEFAULT_MODEL_CREATED_AT_TIME is the fixed `created`.
MODEL_OWNER: Final = "openai"
MODEL_CREATED_AT: Final = 1677610602


def auth_error(message: str, status: int) -> dict[str, Any]:
    """LiteLLM's auth refusal body (a ProxyException of type auth_error; param and code are strings)."""
    return {"error": {"message": message, "type": "auth_error", "param": "None", "code": str(status)}}


def invalid_model(path: str, model: str) -> dict[str, Any]:
    """LiteLLM's 400 for a model it does not route: the route is named without its /v1 prefix."""
    route = path.removeprefix("/v1") or path
    message = f"{route}: Invalid model name passed in model={model}. {AVAILABLE_MODELS_HINT}"
    return {"error": {"message": message, "type": "invalid_request_error", "param": "model", "code": "400"}}


def model_listing(model_ids: list[str]) -> dict[str, Any]:
    """LiteLLM's GET /v1/models body."""
    cards = [{"id": model_id, "object": "model", "created": MODEL_CREATED_AT, "owned_by": MODEL_OWNER}
             for model_id in model_ids]
    return {"data": cards, "object": "list"}
