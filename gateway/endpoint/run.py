"""Start the endpoint proxy under uvicorn (uvloop + httptools: it is the hot path)."""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn

from berth import compiled
from berth.api_client import ApiClient
from berth.errors import BerthError
from berth.http_connection import guarded_protocol
from berth.security import SigningKey, TokenVerifier
from berth.settings import ProxyHolding, ProxyLimits, ServerTLS, StateLayout, metrics_enabled, state_dir_if_set
from berth.settings.connections import ConnectionLimits
from berth.settled_server import serve
from gateway.edge.proxy_metrics import ProxyMetrics
from gateway.endpoint.endpoint_proxy import EndpointProxy


def load_signer() -> SigningKey | None:
    """The control plane's signing key from BERTH_STATE_DIR, to sign caller assertions locally (no
    network on the hot path). Absent (a proxy host without the state dir): no assertions."""
    state_dir = state_dir_if_set()
    if state_dir is None or not (StateLayout(state_dir).keys / "signing.pem").exists():
        return None
    return SigningKey.load_or_create(StateLayout(state_dir).keys)


def run_endpoint_proxy(api_url: str, token: str, host: str, port: int, fd: int | None = None) -> None:
    """Serve on host:port, or on the inherited listening socket `fd` (`berth up` or systemd owns it)."""
    async def load_keys() -> TokenVerifier:
        async with ApiClient(api_url, token) as api:
            try:
                return TokenVerifier.from_jwks(await api.internal_keys_when_up())
            except BerthError:
                raise SystemExit(f"cannot load the signing keys from {api_url}") from None

    hot_path = compiled.status()  # `berth proxy` installed the compiled build, where it is current
    logging.getLogger(__name__).log(logging.WARNING if hot_path == compiled.STALE else logging.INFO, "hot path %s",
                                    hot_path)
    verifier = asyncio.run(load_keys())
    app = EndpointProxy(ApiClient(api_url, token), verifier, signer=load_signer(),
                        metrics=ProxyMetrics(enabled=metrics_enabled()))
    # How long a request for a pool at zero is held, and how many may wait per endpoint.
    holding = ProxyHolding.from_env()
    app.holds.timeout_s = holding.timeout_s or app.holds.timeout_s
    app.holds.max_held = holding.max_held or app.holds.max_held
    app.holds.front_hold_s = holding.front_hold_s or app.holds.front_hold_s
    app.limits = ProxyLimits.from_env()  # BERTH_UPSTREAM_DEADLINE_S, BERTH_STREAM_IDLE_S; body limit: the LimitPolicy
    tls = ServerTLS.from_env()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, loop="uvloop",
                            interface="asgi3",  # said, not guessed from a signature, which compiled code may not show
                            http=guarded_protocol(ConnectionLimits.from_env()), lifespan="on",
                            **(tls.uvicorn_options() if tls else {}))
    # Not uvicorn's own `fd=`: it reads every inherited socket as AF_UNIX. socket(fileno=) asks the kernel.
    serve(config, None if fd is None else [socket.socket(fileno=fd)])
