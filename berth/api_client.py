"""Typed async client of the control-plane REST API, shared by the CLI, node agents, the control
worker and the endpoint proxy. One httpx.AsyncClient per instance; tests inject a transport."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import quote

import httpx

from berth.contracts import (
    EndpointService,
    FenceRequest,
    ReplicaReadiness,
    ReplicaRecord,
    ReserveRequest,
    ReserveResult,
    ServicePort,
    ServicePortRequest,
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
from berth.tokens import RevokeResult, TokenRecord

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
    async def catalog(self, category: str | None = None, tag: str | None = None) -> list[dict[str, Any]]:
        params = {k: v for k, v in {"category": category, "tag": tag}.items() if v}
        return await self.request("GET", "/v1/catalog", params=params)  # type: ignore[no-any-return]

    async def catalog_entry(self, name: str) -> dict[str, Any]:
        return await self.request("GET", "/v1/catalog/entry", params={"name": name})  # type: ignore[no-any-return]

    async def start_workflow(self, entry: str, values: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", "/v1/workflows", json={"entry": entry, "values": values})  # type: ignore[no-any-return]

    async def workflows(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/v1/workflows")  # type: ignore[no-any-return]

    async def describe_workflow(self, workflow_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}")  # type: ignore[no-any-return]

    async def workflow_definition(self, workflow_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}/definition")  # type: ignore[no-any-return]

    async def stop_workflow(self, workflow_id: str) -> dict[str, Any]:
        return await self.request("POST", f"/v1/workflows/{_segment(workflow_id)}/stop")  # type: ignore[no-any-return]

    async def workflow_log(self, workflow_id: str, job: str | None, lines: int = 200) -> dict[str, Any]:
        params: dict[str, Any] = {"lines": lines}
        if job:
            params["job"] = job
        return await self.request("GET", f"/v1/workflows/{_segment(workflow_id)}/logs", params=params)  # type: ignore[no-any-return]

    # --- endpoints and nodes ----------------------------------------------------------------------
    async def endpoints(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/v1/endpoints")  # type: ignore[no-any-return]

    async def generate_token(self, endpoint_id: str, expiration: str) -> dict[str, Any]:
        return await self.request("POST", f"/v1/endpoints/{_segment(endpoint_id)}/tokens",  # type: ignore[no-any-return]
                                  json={"expiration": expiration})

    async def endpoint_client_config(self, endpoint_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/endpoints/{_segment(endpoint_id)}/client-config")  # type: ignore[no-any-return]

    async def nodes(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/v1/nodes")  # type: ignore[no-any-return]

    async def set_node_draining(self, node_id: str, draining: bool) -> dict[str, Any]:
        action = "drain" if draining else "undrain"
        return await self.request("POST", f"/v1/nodes/{_segment(node_id)}/{_segment(action)}")  # type: ignore[no-any-return]

    async def heartbeat_node(self, node_id: str, inventory: dict[str, Any]) -> dict[str, Any]:
        return await self.request("POST", f"/v1/nodes/{_segment(node_id)}/heartbeat", json=inventory)  # type: ignore[no-any-return]

    async def jwks(self) -> dict[str, Any]:
        return await self.request("GET", "/.well-known/jwks.json")  # type: ignore[no-any-return]

    # --- secrets ------------------------------------------------------------------------------------
    async def create_secret(self, ref: str, kind: str, value: str) -> dict[str, Any]:
        return await self.request("POST", "/v1/secrets",  # type: ignore[no-any-return]
                                  json={"ref": ref, "type": kind, "value": value})

    async def secrets(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/v1/secrets")  # type: ignore[no-any-return]

    async def delete_secret(self, ref: str) -> None:
        await self.request("DELETE", "/v1/secrets", params={"ref": ref})

    async def resolve_secret(self, ref: str, user: str) -> tuple[str, str]:
        data = await self.request("POST", "/v1/internal/secrets/resolve", json={"ref": ref, "user": user})
        return data["type"], data["value"]

    # --- internal (control worker, endpoint proxy) -------------------------------------------------
    async def internal_keys(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/internal/keys")  # type: ignore[no-any-return]

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
        return ReserveResult.model_validate(data)

    async def release(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/reservations/{_segment(copy_id)}")

    async def fence(self, request: FenceRequest) -> None:
        await self.request("POST", f"/v1/internal/reservations/{_segment(request.copy_id)}/fence",
                           json=request.model_dump(mode="json"))

    async def publish_replica(self, record: ReplicaRecord) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{_segment(record.copy_id)}",
                           json=record.model_dump(mode="json"))

    async def unpublish_replica(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/replicas/{_segment(copy_id)}")

    async def report_load(self, endpoint_id: str, requests: int) -> None:
        await self.request("POST", f"/v1/internal/endpoints/{_segment(endpoint_id)}/load", json={"requests": requests})

    async def set_replica_ready(self, copy_id: str, ready: bool) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{copy_id}/ready",
                           json=ReplicaReadiness(ready=ready).model_dump(mode="json"))

    async def drain_replica(self, copy_id: str) -> None:
        await self.request("POST", f"/v1/internal/replicas/{_segment(copy_id)}/drain")

    async def wake_endpoint(self, endpoint_id: str, reason: str = "") -> dict[str, Any]:
        return await self.request("POST", f"/v1/endpoints/{_segment(endpoint_id)}/wake",  # type: ignore[no-any-return]
                                  json={"reason": reason})

    async def scale_workflow(self, workflow_id: str, replicas: int) -> dict[str, Any]:
        return await self.request("POST", f"/v1/workflows/{_segment(workflow_id)}/scale",  # type: ignore[no-any-return]
                                  json={"replicas": replicas})

    async def endpoint_detail(self, endpoint_id: str) -> dict[str, Any]:
        return await self.request("GET", f"/v1/endpoints/{_segment(endpoint_id)}")  # type: ignore[no-any-return]

    async def remove_endpoint(self, endpoint_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/endpoints/{_segment(endpoint_id)}")

    async def reserve_service_port(self, request: ServicePortRequest) -> ServicePort:
        data = await self.request("POST", "/v1/internal/service-ports", json=request.model_dump(mode="json"))
        return ServicePort.model_validate(data)

    async def set_endpoint_service(self, update: EndpointService) -> None:
        await self.request("PUT", f"/v1/internal/endpoints/{_segment(update.endpoint_id)}/service",
                           json=update.model_dump(mode="json"))

    async def owner_token(self, user: str, endpoint_id: str | None = None, ttl_s: int = 7 * 24 * 3600
                          ) -> tuple[str, float]:
        """A token speaking for a workflow's owner (API, or bound to one endpoint), for its service."""
        data = await self.request("POST", f"/v1/internal/users/{_segment(user)}/tokens",
                                  json={"endpoint_id": endpoint_id, "ttl_s": ttl_s})
        return str(data["token"]), float(data["expires_at"])

    async def note_token_lapse(self, endpoint_id: str, expires_at: float) -> None:
        """Record on a service's own endpoint when the tokens it borrowed lapse, for `describe`."""
        await self.request("PUT", f"/v1/internal/endpoints/{_segment(endpoint_id)}/token-lapse",
                           json={"expires_at": expires_at})

    async def replica_keys_token(self, user: str) -> str:
        """For the gateway a node starts for `user`: reads the keys of the copies `user` may reach."""
        data = await self.request("POST", f"/v1/internal/users/{user}/replica-keys-token")
        return str(data["token"])

    async def replica_keys(self) -> dict[str, str]:
        """copy id → key of the copies this client's token may call directly (never logged)."""
        data = await self.request("GET", "/v1/internal/replica-keys")
        return {str(copy_id): str(key) for copy_id, key in (data.get("keys") or {}).items()}

    async def service_token(self, endpoint_id: str) -> str:
        data = await self.request("POST", f"/v1/internal/endpoints/{_segment(endpoint_id)}/service-token")
        return str(data["token"])

    # --- identity -----------------------------------------------------------------------------------
    async def create_user(self, name: str, org: str, groups: list[str], admin: bool) -> dict[str, Any]:
        return await self.request("POST", "/v1/users",  # type: ignore[no-any-return]
                                  json={"name": name, "org": org, "groups": groups, "admin": admin})

    async def users(self) -> list[dict[str, Any]]:
        return await self.request("GET", "/v1/users")  # type: ignore[no-any-return]

    async def create_group(self, name: str, org: str) -> dict[str, Any]:
        return await self.request("POST", "/v1/groups", json={"name": name, "org": org})  # type: ignore[no-any-return]

    async def add_member(self, group: str, user: str) -> dict[str, Any]:
        return await self.request("POST", f"/v1/groups/{_segment(group)}/members",  # type: ignore[no-any-return]
                                  json={"user": user})

    async def user_token(self, name: str, expiration: str) -> dict[str, Any]:
        return await self.request("POST", f"/v1/users/{_segment(name)}/tokens",  # type: ignore[no-any-return]
                                  json={"expiration": expiration})

    async def tokens(self, user: str | None = None) -> list[TokenRecord]:
        params = {"user": user} if user else {}
        rows = await self.request("GET", "/v1/tokens", params=params)
        return [TokenRecord.model_validate(row) for row in rows]

    async def revoke_token(self, token_id: str) -> RevokeResult:
        return RevokeResult.model_validate(await self.request("DELETE", f"/v1/tokens/{_segment(token_id)}"))

    async def revoke_all_tokens(self, user: str) -> RevokeResult:
        path = f"/v1/users/{_segment(user)}/tokens/revoke-all"
        return RevokeResult.model_validate(await self.request("POST", path))

    async def whoami(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/whoami")  # type: ignore[no-any-return]

    async def routes(self) -> dict[str, Any]:
        return await self.request("GET", "/v1/internal/routes")  # type: ignore[no-any-return]
