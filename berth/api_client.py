"""Typed async client of the control-plane REST API, shared by the CLI, node agents, the control
worker and the endpoint proxy: each method returns the response model its route declares (berth.contracts).
One httpx.AsyncClient per instance; tests inject a transport."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from berth.contracts import (
    AuditAppended,
    AuditBatch,
    AuditRecord,
    AuditRow,
    AuditVerdict,
    CopyReadiness,
    CopyRecord,
    EndpointClientFacts,
    EndpointService,
    EndpointToken,
    EndpointTokenRequest,
    EndpointView,
    EntryDetail,
    EntrySummary,
    FenceRequest,
    GroupRequest,
    GroupView,
    IssuedKey,
    Jwks,
    KeyCreateRequest,
    KeyRecord,
    KeyReservation,
    KeyReserveRequest,
    KeyRotateRequest,
    KeyVerdict,
    KeyVerifyRequest,
    LoadReport,
    MemberRequest,
    MintedToken,
    NodeState,
    NodeView,
    OwnerToken,
    OwnerTokenRequest,
    ReplicaKeysList,
    ReplicaKeysToken,
    ReserveRequest,
    ReserveResult,
    ResolvedSecret,
    ResolveRequest,
    RoutesTable,
    SecretCreated,
    SecretRequest,
    SecretView,
    ServicePort,
    ServicePortRequest,
    ServiceToken,
    TokenLapse,
    UserRequest,
    UserView,
    WakeRequest,
    WakeResult,
    WorkflowDefinitionView,
    WorkflowDescription,
    WorkflowLogs,
    WorkflowScaled,
    WorkflowScaleRequest,
    WorkflowStarted,
    WorkflowStopped,
    WorkflowSummary,
)
from berth.errors import (
    AuthenticationError,
    BerthError,
    CapacityError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    UserInputError,
)
from berth.settings import tls_ca_file
from berth.tls import client_context
from berth.tokens import RevokeResult, TokenMintBody, TokenRecord

M = TypeVar("M", bound=BaseModel)

_ERRORS: dict[int, type[BerthError]] = {
    400: UserInputError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 422: CapacityError, 503: UnavailableError,
}


def _verify_reason(error: Exception) -> str:
    """OpenSSL's words for a refused certificate (`unable to get local issuer certificate`), the phrase
    the documents' troubleshooting row names."""
    text = str(error)
    marker = "certificate verify failed: "
    return text.split(marker, 1)[1].split(" (_ssl")[0].rstrip(")") if marker in text else "verify failed"


def _segment(value: str) -> str:
    """One path segment as the URL carries it: every `/`, `?`, `#` and `%` encoded, so an ID typed on
    the command line (`../../v1/internal/routes`) stays one segment and never names another route."""
    if value in ("", ".", ".."):
        raise UserInputError(f"'{value}' is not an ID. Run the matching `list` command to see the IDs.")
    return quote(value, safe="")


class ApiClient:
    def __init__(self, base_url: str, token: str | None, timeout_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, ca_file: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        # An https API with a private CA: the caller's CA file, else BERTH_TLS_CA (what `berth up` gives
        # every component), trusted besides the system store.
        self.ca_file = ca_file or tls_ca_file()
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                         timeout=httpx.Timeout(timeout_s, connect=5.0),
                                         verify=client_context(self.ca_file))

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def _unreachable(self) -> UnavailableError:
        return UnavailableError(f"Cannot reach the Berth API at {self.base_url}. Is the stack running? "
                                "Start it with `berth up`, or set BERTH_API_URL.")

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            if "CERTIFICATE_VERIFY_FAILED" in str(error):
                raise UnavailableError(
                    f"The Berth API's certificate at {self.base_url} is not trusted ({_verify_reason(error)}). "
                    "Set BERTH_TLS_CA to the cluster CA (an administrator prints it with `berth ca-cert`)."
                ) from None
            raise self._unreachable() from None
        except httpx.TransportError:
            raise self._unreachable() from None
        if response.is_success:
            if response.status_code == 204 or not response.content:
                return None
            if response.headers.get("content-type", "").startswith("application/json"):
                return response.json()
            return response.text
        message = response.text
        try:
            message = response.json().get("detail", message)
        except ValueError:
            pass
        raise _ERRORS.get(response.status_code, BerthError)(str(message))

    # --- catalog and workflows --------------------------------------------------------------------
    async def catalog(self, category: str | None = None, tag: str | None = None) -> list[EntrySummary]:
        params = {k: v for k, v in {"category": category, "tag": tag}.items() if v}
        return _many(EntrySummary, await self.request("GET", "/v1/catalog", params=params))

    async def catalog_entry(self, name: str) -> EntryDetail:
        return _one(EntryDetail, await self.request("GET", "/v1/catalog/entry", params={"name": name}))

    async def start_workflow(self, entry: str, values: dict[str, Any]) -> WorkflowStarted:
        data = await self.request("POST", "/v1/workflows", json={"entry": entry, "values": values})
        return _one(WorkflowStarted, data)

    async def workflows(self) -> list[WorkflowSummary]:
        return _many(WorkflowSummary, await self.request("GET", "/v1/workflows"))

    async def describe_workflow(self, workflow_id: str) -> WorkflowDescription:
        data = await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}")
        return _one(WorkflowDescription, data)

    async def workflow_definition(self, workflow_id: str) -> WorkflowDefinitionView:
        data = await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}/definition")
        return _one(WorkflowDefinitionView, data)

    async def stop_workflow(self, workflow_id: str) -> WorkflowStopped:
        data = await self.request("POST", f"/v1/workflows/{_segment(workflow_id)}/stop")
        return _one(WorkflowStopped, data)

    async def workflow_log(self, workflow_id: str, job: str | None, lines: int = 200) -> WorkflowLogs:
        params: dict[str, Any] = {"lines": lines}
        if job:
            params["job"] = job
        data = await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}/logs", params=params)
        return _one(WorkflowLogs, data)

    # --- endpoints and nodes ----------------------------------------------------------------------
    async def endpoints(self) -> list[EndpointView]:
        return _many(EndpointView, await self.request("GET", "/v1/endpoints"))

    async def generate_token(self, endpoint_id: str, expiration: str) -> EndpointToken:
        data = await self.request("POST", f"/v1/endpoints/{_segment(endpoint_id)}/tokens",
                                  json=_body(EndpointTokenRequest(expiration=expiration)))
        return _one(EndpointToken, data)

    async def endpoint_client_config(self, endpoint_id: str) -> EndpointClientFacts:
        data = await self.request("GET", f"/v1/endpoints/{_segment(endpoint_id)}/client-config")
        return _one(EndpointClientFacts, data)

    async def nodes(self) -> list[NodeView]:
        return _many(NodeView, await self.request("GET", "/v1/nodes"))

    async def set_node_draining(self, node_id: str, draining: bool) -> NodeState:
        action = "drain" if draining else "undrain"
        return _one(NodeState, await self.request("POST", f"/v1/nodes/{_segment(node_id)}/{_segment(action)}"))

    async def heartbeat_node(self, node_id: str, inventory: dict[str, Any]) -> NodeState:
        data = await self.request("POST", f"/v1/nodes/{_segment(node_id)}/heartbeat", json=inventory)
        return _one(NodeState, data)

    async def jwks(self) -> dict[str, Any]:
        """The published key set, as PyJWT reads one (a dict), checked to be a key set."""
        return _key_set(await self.request("GET", "/.well-known/jwks.json"))

    # --- secrets ------------------------------------------------------------------------------------
    async def create_secret(self, ref: str, kind: str, value: str) -> SecretCreated:
        data = await self.request("POST", "/v1/secrets", json=_body(SecretRequest(ref=ref, type=kind, value=value)))
        return _one(SecretCreated, data)

    async def secrets(self) -> list[SecretView]:
        return _many(SecretView, await self.request("GET", "/v1/secrets"))

    async def delete_secret(self, ref: str) -> None:
        await self.request("DELETE", "/v1/secrets", params={"ref": ref})

    async def resolve_secret(self, ref: str, user: str) -> tuple[str, str]:
        data = await self.request("POST", "/v1/internal/secrets/resolve",
                                  json=_body(ResolveRequest(ref=ref, user=user)))
        secret = _one(ResolvedSecret, data)
        return secret.type, secret.value

    # --- internal (control worker, endpoint proxy) -------------------------------------------------
    async def internal_keys(self) -> dict[str, Any]:
        """The verification keys, as PyJWT reads a key set (a dict), checked to be one."""
        return _key_set(await self.request("GET", "/v1/internal/keys"))

    async def internal_keys_when_up(self, attempts: int = 100, every_s: float = 0.2) -> dict[str, Any]:
        """The verification keys, waiting for an API that is still starting beside its caller."""
        for _ in range(attempts - 1):
            try:
                return await self.internal_keys()
            except BerthError:
                await asyncio.sleep(every_s)
        return await self.internal_keys()

    async def reserve(self, request: ReserveRequest) -> ReserveResult:
        data = await self.request("POST", "/v1/internal/reservations", json=request.model_dump(mode="json"))
        return _one(ReserveResult, data)

    async def release(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/reservations/{_segment(copy_id)}")

    async def fence(self, request: FenceRequest) -> None:
        await self.request("POST", f"/v1/internal/reservations/{_segment(request.copy_id)}/fence",
                           json=request.model_dump(mode="json"))

    async def publish_replica(self, record: CopyRecord) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{_segment(record.copy_id)}",
                           json=record.model_dump(mode="json"))

    async def unpublish_replica(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/replicas/{_segment(copy_id)}")

    async def report_load(self, endpoint_id: str, requests: int) -> None:
        await self.request("POST", f"/v1/internal/endpoints/{_segment(endpoint_id)}/load",
                           json=_body(LoadReport(requests=requests)))

    async def set_replica_ready(self, copy_id: str, ready: bool) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{copy_id}/ready",
                           json=CopyReadiness(ready=ready).model_dump(mode="json"))

    async def drain_replica(self, copy_id: str) -> None:
        await self.request("POST", f"/v1/internal/replicas/{_segment(copy_id)}/drain")

    async def wake_endpoint(self, endpoint_id: str, reason: str = "") -> WakeResult:
        data = await self.request("POST", f"/v1/endpoints/{_segment(endpoint_id)}/wake",
                                  json=_body(WakeRequest(reason=reason)))
        return _one(WakeResult, data)

    async def scale_workflow(self, workflow_id: str, replicas: int) -> WorkflowScaled:
        data = await self.request("POST", f"/v1/workflows/{_segment(workflow_id)}/scale",
                                  json=_body(WorkflowScaleRequest(copies=replicas)))
        return _one(WorkflowScaled, data)

    async def endpoint_detail(self, endpoint_id: str) -> EndpointView:
        return _one(EndpointView, await self.request("GET", f"/v1/endpoints/{_segment(endpoint_id)}"))

    async def remove_endpoint(self, endpoint_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/endpoints/{_segment(endpoint_id)}")

    async def reserve_service_port(self, request: ServicePortRequest) -> ServicePort:
        data = await self.request("POST", "/v1/internal/service-ports", json=request.model_dump(mode="json"))
        return _one(ServicePort, data)

    async def set_endpoint_service(self, update: EndpointService) -> None:
        await self.request("PUT", f"/v1/internal/endpoints/{_segment(update.endpoint_id)}/service",
                           json=update.model_dump(mode="json"))

    async def owner_token(self, user: str, endpoint_id: str | None = None, ttl_s: int = 7 * 24 * 3600
                          ) -> tuple[str, float]:
        """A token speaking for a workflow's owner (API, or bound to one endpoint), for its service."""
        data = await self.request("POST", f"/v1/internal/users/{_segment(user)}/tokens",
                                  json=_body(OwnerTokenRequest(endpoint_id=endpoint_id, ttl_s=ttl_s)))
        token = _one(OwnerToken, data)
        return token.token, token.expires_at

    async def note_token_lapse(self, endpoint_id: str, expires_at: float) -> None:
        """Record on a service's own endpoint when the tokens it borrowed lapse, for `describe`."""
        await self.request("PUT", f"/v1/internal/endpoints/{_segment(endpoint_id)}/token-lapse",
                           json=_body(TokenLapse(expires_at=expires_at)))

    async def replica_keys_token(self, user: str) -> str:
        """For the gateway a node starts for `user`: reads the keys of the copies `user` may reach."""
        data = await self.request("POST", f"/v1/internal/users/{user}/replica-keys-token")
        return _one(ReplicaKeysToken, data).token

    async def replica_keys(self) -> dict[str, str]:
        """copy id → key of the copies this client's token may call directly (never logged)."""
        return _one(ReplicaKeysList, await self.request("GET", "/v1/internal/replica-keys")).keys

    async def service_token(self, endpoint_id: str) -> str:
        data = await self.request("POST", f"/v1/internal/endpoints/{_segment(endpoint_id)}/service-token")
        return _one(ServiceToken, data).token

    # --- identity -----------------------------------------------------------------------------------
    async def create_user(self, name: str, org: str, groups: list[str], admin: bool) -> UserView:
        data = await self.request("POST", "/v1/users",
                                  json=_body(UserRequest(name=name, org=org, groups=groups, admin=admin)))
        return _one(UserView, data)

    async def users(self) -> list[UserView]:
        return _many(UserView, await self.request("GET", "/v1/users"))

    async def create_group(self, name: str, org: str) -> GroupView:
        return _one(GroupView, await self.request("POST", "/v1/groups", json=_body(GroupRequest(name=name, org=org))))

    async def add_member(self, group: str, user: str) -> UserView:
        data = await self.request("POST", f"/v1/groups/{_segment(group)}/members", json=_body(MemberRequest(user=user)))
        return _one(UserView, data)

    async def user_token(self, name: str, expiration: str) -> MintedToken:
        data = await self.request("POST", f"/v1/users/{_segment(name)}/tokens",
                                  json=_body(TokenMintBody.model_validate({"expiration": expiration})))
        return _one(MintedToken, data)

    async def tokens(self, user: str | None = None) -> list[TokenRecord]:
        params = {"user": user} if user else {}
        return _many(TokenRecord, await self.request("GET", "/v1/tokens", params=params))

    async def revoke_token(self, token_id: str) -> RevokeResult:
        return _one(RevokeResult, await self.request("DELETE", f"/v1/tokens/{_segment(token_id)}"))

    async def revoke_all_tokens(self, user: str) -> RevokeResult:
        path = f"/v1/users/{_segment(user)}/tokens/revoke-all"
        return _one(RevokeResult, await self.request("POST", path))

    # --- API keys ---------------------------------------------------------------------------------
    async def create_key(self, request: KeyCreateRequest) -> IssuedKey:
        return _one(IssuedKey, await self.request("POST", "/v1/keys", json=_body(request)))

    async def keys(self) -> list[KeyRecord]:
        return _many(KeyRecord, await self.request("GET", "/v1/keys"))

    async def describe_key(self, key_id: str) -> KeyRecord:
        return _one(KeyRecord, await self.request("GET", f"/v1/keys/{_segment(key_id)}"))

    async def rotate_key(self, key_id: str, request: KeyRotateRequest) -> IssuedKey:
        return _one(IssuedKey, await self.request("POST", f"/v1/keys/{_segment(key_id)}/rotate",
                                                  json=_body(request)))

    async def revoke_key(self, key_id: str) -> KeyRecord:
        return _one(KeyRecord, await self.request("DELETE", f"/v1/keys/{_segment(key_id)}"))

    async def verify_key(self, request: KeyVerifyRequest) -> KeyVerdict:
        return _one(KeyVerdict, await self.request("POST", "/v1/internal/keys/verify", json=_body(request)))

    async def reserve_key_requests(self, key_id: str, requests: int) -> KeyReservation:
        body = _body(KeyReserveRequest(requests=requests))
        return _one(KeyReservation, await self.request("POST", f"/v1/internal/keys/{_segment(key_id)}/reserve",
                                                       json=body))

    async def whoami(self) -> UserView:
        return _one(UserView, await self.request("GET", "/v1/whoami"))

    async def routes(self) -> RoutesTable:
        return _one(RoutesTable, await self.request("GET", "/v1/internal/routes"))

    # --- audit chain ------------------------------------------------------------------------------
    async def append_audit(self, records: list[AuditRecord]) -> AuditAppended:
        data = await self.request("POST", "/v1/internal/audit", json=_body(AuditBatch(records=records)))
        return _one(AuditAppended, data)

    async def audit(self, endpoint_id: str | None = None, key_id: str | None = None, since: float | None = None,
                    limit: int = 100) -> list[AuditRow]:
        params = {k: v for k, v in {"endpoint": endpoint_id, "key": key_id, "since": since}.items() if v is not None}
        return _many(AuditRow, await self.request("GET", "/v1/audit", params={**params, "limit": limit}))

    async def verify_audit(self) -> AuditVerdict:
        return _one(AuditVerdict, await self.request("GET", "/v1/audit/verify"))


def _body(request: BaseModel) -> Any:
    """A request model as its JSON body: the fields the caller set (a default left out, as before)."""
    return request.model_dump(mode="json", exclude_unset=True)


def _one(model: type[M], data: Any) -> M:
    """The answer as its route's model; an answer that is not one is Berth's error, so that every caller's
    `except BerthError` (a refresh loop, the CLI's one-line errors) covers it too."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise BerthError(f"The Berth API's answer is not a {model.__name__} ({error.error_count()} "
                         f"problem(s), first: {error.errors()[0]['loc']} {error.errors()[0]['msg']}). "
                         "Are the API and this client the same version?") from None


def _many(model: type[M], rows: Any) -> list[M]:
    """A listing's rows as `model`s."""
    if not isinstance(rows, list):
        raise BerthError(f"The Berth API answered a listing with {type(rows).__name__}, not a list.")
    return [_one(model, row) for row in rows]


def _key_set(data: Any) -> dict[str, Any]:
    return _one(Jwks, data).model_dump(mode="json")
