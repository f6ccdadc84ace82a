"""Request path: per-request work of LiteLLM 1.108.7 that Berth's proxy has no use for, set aside at worker start-up."""

# Runs inside the LiteLLM proxy process, started by gateway.litellm_hooks.replica_sync's start-up hook.
# bench/litellm_overhead.py measured each of these against stock LiteLLM in front of the same copy, CPU per
# request of the LiteLLM process (docs/performance.md, "Full path vs stock LiteLLM"):
# - The access log: uvicorn writes one INFO line per request through LiteLLM's redacting filter. The endpoint
#   proxy in front admits, audits and answers every request already; the LiteLLM log keeps what an operator
#   reads it for (replica changes, refusals at ERROR, warnings).
# - A failing import per request: LiteLLM's auth imports `litellm.integrations.otel.logger` on every request
#   (`_seed_request_destinations`, best-effort, errors swallowed); without opentelemetry's SDK, which
#   `.venv-litellm` lacks, that import fails half-way and Python runs it again on the next request.
# - A client per text completion: `/v1/completions` to a `hosted_vllm/` deployment goes through the OpenAI SDK
#   with a new HTTP client per call unless `litellm.aclient_session` is set (litellm/llms/openai/common_utils.py
#   `_get_async_http_client`). With LiteLLM's default aiohttp transport each of those clients left its session
#   unclosed ("Unclosed client session" in the log); with httpx's, each built a new TLS context and pool. One
#   shared client for the process instead; LiteLLM never closes a client it did not build.

from __future__ import annotations

import asyncio
import importlib
import logging
import sys
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Final

import httpx
import litellm
from litellm.llms.custom_httpx.http_handler import get_ssl_configuration

ACCESS_LOGGER: Final = "uvicorn.access"
# Imported (and so retried) by litellm/proxy/auth/user_api_key_auth.py `_seed_request_destinations`.
PER_REQUEST_IMPORTS: Final = ("litellm.integrations.otel.logger",)

logger: Final = logging.getLogger("LiteLLM Proxy").getChild("berth_request_path")
logger.setLevel(logging.INFO)


def quiet_access_log() -> None:
    """No line per request: uvicorn checks the level before it formats one."""
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.WARNING)


def settle_failing_import(module_name: str) -> bool:
    """Import `module_name` once; if it cannot be imported, make later imports fail at once, with the same
    ModuleNotFoundError, instead of running the module again up to its failing line. True if settled so."""
    try:
        importlib.import_module(module_name)
    except ModuleNotFoundError:
        # A None entry in sys.modules is Python's documented way to make an import raise ModuleNotFoundError.
        sys.modules[module_name] = None  # type: ignore[assignment]
        return True
    return False


def share_sdk_client() -> httpx.AsyncClient:
    """One HTTP client for the calls LiteLLM makes through the OpenAI SDK (text completions), with the trust
    LiteLLM would have given each per-call client. No connection cap: per-call clients had none either.

    Shared by every caller's requests, so it keeps nothing of one for the next: no cookie is ever stored (a
    per-call client forgot them with the call), and no redirect is followed (a copy answers its routes itself;
    a redirect would carry a caller's prompt to wherever it points)."""
    client: Final = httpx.AsyncClient(
        verify=get_ssl_configuration(),
        follow_redirects=False,
        cookies=CookieJar(policy=DefaultCookiePolicy(allowed_domains=[])),
        limits=httpx.Limits(max_connections=None, max_keepalive_connections=None),
    )
    litellm.aclient_session = client
    return client


async def _close_at_shutdown(client: httpx.AsyncClient) -> None:
    try:
        await asyncio.Event().wait()  # until the worker's loop cancels its tasks at shutdown
    finally:
        if litellm.aclient_session is client:
            litellm.aclient_session = None
        await client.aclose()


def start() -> asyncio.Task[None]:
    """Set the per-request work aside; the caller keeps the returned task (it closes the shared client)."""
    quiet_access_log()
    settled: Final = [name for name in PER_REQUEST_IMPORTS if settle_failing_import(name)]
    client: Final = share_sdk_client()
    logger.info("berth request path: access log off, one SDK client%s",
                f", not importable: {', '.join(settled)}" if settled else "")
    return asyncio.create_task(_close_at_shutdown(client), name="berth-sdk-client")
