"""What the control plane knows for OpenCode: an endpoint's client facts; the entry's submission checks."""

from __future__ import annotations

import re
from typing import Any

from berth.errors import NotFoundError, UserInputError
from berth.kinds import ProcessKind
from berth.opencode import check_context
from catalog.definition import WorkflowDefinition
from catalog.entry import load_catalog
from server.models import EndpointRow
from server.store import Store

TOOL_FLAG = "--enable-auto-tool-choice"
ENDPOINT_PATH = re.compile(r"/endpoints/(?P<id>[A-Za-z0-9_-]+)/?(?:v1/?)?$")


def client_facts(store: Store, endpoint: EndpointRow, url: str) -> dict[str, Any]:
    """The facts a client config needs: URL, the model id the endpoint serves (its vLLM
    `--served-model-name`, which /v1/models lists), the workflow's MaxContextSize and tool calling."""
    stored = store.workflow_definition(store.workflow(endpoint.workflow_id))
    definition = WorkflowDefinition.model_validate(stored)
    replica = definition.replica
    if replica is None or not definition.model_id:
        raise UserInputError(f"Endpoint {endpoint.id} serves no model ({definition.entry}); "
                             "`berth endpoint opencode-config` needs a model endpoint.")
    engine = replica.engine
    flags = (*engine.args, *engine.extra_args)
    return {
        "endpoint_id": endpoint.id, "workflow_id": endpoint.workflow_id, "url": url, "scope": endpoint.scope,
        "model_id": engine.served_model_name, "max_context": engine.max_model_len,
        "tool_calling": TOOL_FLAG in flags, "proxy": definition.proxy,
    }


def check_submission(store: Store, definition: WorkflowDefinition, proxy_url: str) -> None:
    """Refuse at submission an OpenCode MaxContextSize above the model's, where the model is known: an
    `Endpoint` on this cluster (its workflow's own MaxContextSize), or a `Model` a catalog entry describes."""
    service = definition.service
    if service is None or service.kind is not ProcessKind.OPENCODE:
        return
    options = service.options
    requested = int(options.get("max_context") or 0)
    endpoint_url = options.get("endpoint")
    if endpoint_url:
        endpoint_id = _cluster_endpoint_id(str(endpoint_url), proxy_url)
        if endpoint_id is not None:
            try:
                endpoint = store.endpoint(endpoint_id)
            except NotFoundError:
                raise UserInputError(f"Endpoint={endpoint_url}: this cluster has no endpoint {endpoint_id} "
                                     "(stopped, or mistyped). `berth endpoint list` shows yours.") from None
            facts = client_facts(store, endpoint, str(endpoint_url))
            check_context(requested, facts["max_context"], f"endpoint {endpoint_id} ({facts['model_id']})")
            model = options.get("model")
            if model and model != facts["model_id"]:
                raise UserInputError(f"Model={model}: endpoint {endpoint_id} serves {facts['model_id']} "
                                     "only; use exactly the id its /v1/models lists.")
            return
    model = options.get("model")
    if model:
        for entry in load_catalog().values():
            if entry.model is not None and entry.model.repo == model:
                check_context(requested, entry.model.max_context, f"{model} (catalog entry {entry.name})")
                return


def _cluster_endpoint_id(url: str, proxy_url: str) -> str | None:
    """`<proxy>/endpoints/<id>[/v1]` → id; any other URL is an API outside Berth."""
    base = proxy_url.rstrip("/")
    if not url.startswith(base + "/"):
        return None
    match = ENDPOINT_PATH.search(url[len(base):])
    return match.group("id") if match else None
