"""The control plane's composition root: the server's context built from a state dir, and the REST API
(FastAPI) composed from it: app-wide limits and error mapping (one error shape, declared on every route), one
router per resource (server/routes/).
What a route needs reaches it through dependencies (server/context.py, server/guards.py), never through
module globals. The API holds no state of its own (the autoscaler runs in the control worker,
control/autoscale_loop.py), so several API processes may serve one store."""

from __future__ import annotations

from pathlib import Path

from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse
from opentelemetry.trace import TracerProvider

import console
from berth.api_keys import KeyHasher
from berth.errors import BerthError
from berth.security import Cipher, ReplicaKeys, SigningKey, TokenVerifier
from berth.settings import ClusterSettings, SlurmSettings, StateLayout, admin_user, key_hmac_secret_file, limit_policy
from server import control_metrics, refusals, request_limits, scheduler
from server.context import ServerContext
from server.gpu_health import GpuHealthRule
from server.model_jobs import evict_model_cache, start_model_job
from server.routes import ROUTERS
from server.store.api_keys import ApiKeys
from server.store.database import Store
from server.store.events import Retention
from server.store.token_registry import TokenRegistry


def build_context(state_dir: Path, temporal_address: str, database_url: str | None = None) -> ServerContext:
    state = StateLayout(state_dir)
    settings = ClusterSettings.load(state_dir)
    limits = limit_policy()  # a configured but invalid file stops the start in one line, as in the proxies
    cipher = Cipher.load_or_create(state.keys)
    signing = SigningKey.load_or_create(state.keys)
    # Before the store opens: a configured but unreadable or empty secret stops the start in one line.
    hasher = KeyHasher.load(state.keys, key_hmac_secret_file())
    store = Store(database_url or f"sqlite:///{state.store_db}", cipher, settings.node_offline_after_s,
                  scheduler.Policy.make(settings.placement_policy), GpuHealthRule.from_settings(settings))
    store.events.retention = Retention(keep_s=settings.events_keep_days * 86400.0, max_rows=settings.events_max_rows)
    admin = admin_user()
    store.ensure_user(admin, org="default", groups=["default"], admin=True)
    return ServerContext(state=state, settings=settings, store=store, signing=signing,
                         verifier=TokenVerifier.from_jwks(signing.jwks()), cipher=cipher,
                         temporal_address=temporal_address,
                         tokens=TokenRegistry(store, settings.token_revocation_refresh_s),
                         replica_keys=ReplicaKeys.load_or_create(state.keys),
                         api_keys=ApiKeys(store, hasher), limits=limits,
                         # An invalid Slurm setting stops a Slurm cluster's API in one line, at start.
                         slurm=SlurmSettings.load(state_dir) if settings.placement_backend == "slurm"
                         else SlurmSettings.model_validate({}),
                         # Model jobs run in Temporal workflows (server/model_jobs.py); the routes only record.
                         model_jobs=start_model_job, model_cache_evict=evict_model_cache)


async def _berth_error(_request: Request, error: BerthError) -> JSONResponse:
    return JSONResponse({"detail": str(error), "code": error.code}, status_code=error.http_status)


async def _out_of_range(_request: Request, _error: OverflowError) -> JSONResponse:
    """The net under the contracts' bounds: an integer past what a store column holds fails the driver's conversion
    (SQLite: OverflowError); the caller sent it, so the answer is theirs to mend (400), never a 500."""
    return JSONResponse({"detail": "A number in the request is too large for Berth to store; send a smaller one.",
                         "code": "invalid_input"}, status_code=400)


def create_app(context: ServerContext, tracer_provider: TracerProvider | None = None) -> FastAPI:
    """The API. `tracer_provider`: a test's own; None: the process's (berth/telemetry.setup_tracing), whose spans
    carry a URL's query with its values redacted."""
    # FastAPI's own telemetry: its server spans, yes; its OpenTelemetry log records, never (they would carry
    # validation messages and exception texts that may quote what a caller sent); no exporters of its choosing.
    # One schema per model, not an -Input and an -Output twin: a client generated from the document gets one class.
    app = FastAPI(title="Berth control plane", separate_input_output_schemas=False,
                  telemetry={"tracer_provider": tracer_provider, "logs": False, "auto_configure": False},
                  dependencies=[Depends(request_limits.check_path_ids), Depends(request_limits.check_query_once)])
    app.state.context = context
    request_limits.install(app, context.settings.max_request_body_bytes)
    control_metrics.install(app, context)  # after the body limit: its timer is the outermost middleware
    app.exception_handler(BerthError)(_berth_error)
    app.exception_handler(OverflowError)(_out_of_range)
    for router in ROUTERS:
        app.include_router(router)
    console.install(app)  # the web console at /ui: pages over these same routes, as the signed-in user
    refusals.install(app)  # after every route: /openapi.json states each one's refusals in berth.contracts.Refusal
    return app
