"""Typed async client of the control-plane REST API, shared by the CLI, node agents, the control
worker and the endpoint proxy: each method returns the response model its route declares (berth.contracts).
One httpx.AsyncClient per instance; tests inject a transport."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_backup import BackupApi
from berth.api_capacity import CapacityApi
from berth.api_endpoint_history import EndpointHistoryApi
from berth.api_events import EventsApi
from berth.api_explain import ExplainApi
from berth.api_models import ModelsApi
from berth.api_policies import PoliciesApi
from berth.api_rollouts import RolloutsApi
from berth.api_slurm import SlurmApi
from berth.api_transport import body, many, one, segment
from berth.api_usage import UsageApi
from berth.api_workflows import WorkflowsApi

if TYPE_CHECKING:
    from berth.contracts import (
        AuditAppended,
        AuditBatch,
        AuditRow,
        AuditVerdict,
        CopyOutcomes,
        CopyRecord,
        CopyScrape,
        EndpointClientFacts,
        EndpointFront,
        EndpointPolicy,
        EndpointToken,
        EndpointTokenRecord,
        EndpointTokenRevoked,
        EndpointView,
        FenceRequest,
        FrontPort,
        FrontPortRequest,
        GroupView,
        IssuedKey,
        KeyCreateRequest,
        KeyRecord,
        KeyReservation,
        KeyRotateRequest,
        KeyVerdict,
        KeyVerifyRequest,
        LiteLLMDeletedKeys,
        LiteLLMIssuedKey,
        LiteLLMKeyCall,
        LiteLLMKeyInfoAnswer,
        MintedToken,
        NodeState,
        NodeView,
        ReserveRequest,
        ReserveResult,
        RoutesTable,
        SecretCreated,
        SecretView,
        UserView,
        WakeResult,
        WorkflowScaled,
    )
from berth.errors import (
    BerthError,
)
from berth.tokens import RevokeResult, TokenMintBody, TokenRecord


class ApiClient(WorkflowsApi, ModelsApi, RolloutsApi, CapacityApi, ExplainApi, BackupApi, EndpointHistoryApi,
                EventsApi, PoliciesApi, SlurmApi, UsageApi):
    """One method per route, each returning the model its route declares (the catalog's and the workflows'
    in berth/api_workflows.py, the model registry's in berth/api_models.py, the rollouts' in
    berth/api_rollouts.py, the capacity's in berth/api_capacity.py, the explain's in berth/api_explain.py, backup
    and restore in berth/api_backup.py, an endpoint's history in berth/api_endpoint_history.py, usage and its budgets in
    berth/api_usage.py)."""

    # --- endpoints and nodes ----------------------------------------------------------------------
    async def endpoints(self) -> list[EndpointView]:
        return many(contracts.EndpointView, await self.request("GET", "/v1/endpoints"))

    async def generate_token(self, endpoint_id: str, expiration: str, note: str = "") -> EndpointToken:
        # A note only when there is one: the body stays what it was for a server that predates notes.
        request = contracts.EndpointTokenRequest(expiration=expiration, **({"note": note} if note else {}))
        data = await self.request("POST", f"/v1/endpoints/{segment(endpoint_id)}/tokens", json=body(request))
        return one(contracts.EndpointToken, data)

    async def endpoint_tokens(self, endpoint_id: str) -> list[EndpointTokenRecord]:
        data = await self.request("GET", f"/v1/endpoints/{segment(endpoint_id)}/tokens")
        return many(contracts.EndpointTokenRecord, data)

    async def revoke_endpoint_token(self, endpoint_id: str, token_id: str) -> EndpointTokenRevoked:
        path = f"/v1/endpoints/{segment(endpoint_id)}/tokens/{segment(token_id)}"
        return one(contracts.EndpointTokenRevoked, await self.request("DELETE", path))

    async def endpoint_client_config(self, endpoint_id: str) -> EndpointClientFacts:
        data = await self.request("GET", f"/v1/endpoints/{segment(endpoint_id)}/client-config")
        return one(contracts.EndpointClientFacts, data)

    # --- an endpoint's policy (its limits override and API-key TTL cap) ----------------------------
    async def endpoint_policy(self, endpoint_id: str) -> EndpointPolicy:
        return one(contracts.EndpointPolicy, await self.request("GET", f"/v1/endpoints/{segment(endpoint_id)}/policy"))

    async def set_endpoint_policy(self, endpoint_id: str, policy: EndpointPolicy) -> EndpointPolicy:
        # By alias: the limits' `global` scope is `global_` in Python.
        data = await self.request("PUT", f"/v1/endpoints/{segment(endpoint_id)}/policy",
                                  json=policy.model_dump(mode="json", by_alias=True, exclude_unset=True))
        return one(contracts.EndpointPolicy, data)

    async def clear_endpoint_policy(self, endpoint_id: str) -> EndpointPolicy:
        data = await self.request("DELETE", f"/v1/endpoints/{segment(endpoint_id)}/policy")
        return one(contracts.EndpointPolicy, data)

    async def nodes(self) -> list[NodeView]:
        return many(contracts.NodeView, await self.request("GET", "/v1/nodes"))

    async def set_node_draining(self, node_id: str, draining: bool) -> NodeState:
        action = "drain" if draining else "undrain"
        return one(contracts.NodeState, await self.request("POST", f"/v1/nodes/{segment(node_id)}/{segment(action)}"))

    async def heartbeat_node(self, node_id: str, inventory: dict[str, Any]) -> NodeState:
        data = await self.request("POST", f"/v1/nodes/{segment(node_id)}/heartbeat", json=inventory)
        return one(contracts.NodeState, data)

    async def jwks(self) -> dict[str, Any]:
        """The published key set, as PyJWT reads one (a dict), checked to be a key set."""
        return _key_set(await self.request("GET", "/.well-known/jwks.json"))

    # --- secrets ------------------------------------------------------------------------------------
    async def create_secret(self, ref: str, kind: str, value: str) -> SecretCreated:
        sent = body(contracts.SecretRequest(ref=ref, type=kind, value=value))
        data = await self.request("POST", "/v1/secrets", json=sent)
        return one(contracts.SecretCreated, data)

    async def secrets(self) -> list[SecretView]:
        return many(contracts.SecretView, await self.request("GET", "/v1/secrets"))

    async def delete_secret(self, ref: str) -> None:
        await self.request("DELETE", "/v1/secrets", params={"ref": ref})

    async def resolve_secret(self, ref: str, user: str) -> tuple[str, str]:
        data = await self.request("POST", "/v1/internal/secrets/resolve",
                                  json=body(contracts.ResolveRequest(ref=ref, user=user)))
        secret = one(contracts.ResolvedSecret, data)
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
        return one(contracts.ReserveResult, data)

    async def release(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/reservations/{segment(copy_id)}")

    async def fence(self, request: FenceRequest) -> None:
        await self.request("POST", f"/v1/internal/reservations/{segment(request.copy_id)}/fence",
                           json=request.model_dump(mode="json"))

    async def publish_replica(self, record: CopyRecord) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{segment(record.copy_id)}",
                           json=record.model_dump(mode="json"))

    async def unpublish_replica(self, copy_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/replicas/{segment(copy_id)}")

    async def report_load(self, endpoint_id: str, requests: int,
                          copies: dict[str, CopyOutcomes] | None = None) -> None:
        await self.request("POST", f"/v1/internal/endpoints/{segment(endpoint_id)}/load",
                           json=body(contracts.LoadReport(requests=requests, **({"copies": copies} if copies else {}))))

    async def report_scrapes(self, copies: dict[str, CopyScrape]) -> None:
        await self.request("PUT", "/v1/internal/scrapes", json=body(contracts.ScrapeReport(copies=copies)))

    async def set_replica_ready(self, copy_id: str, ready: bool) -> None:
        await self.request("PUT", f"/v1/internal/replicas/{copy_id}/ready",
                           json=contracts.CopyReadiness(ready=ready).model_dump(mode="json"))

    async def drain_replica(self, copy_id: str) -> None:
        await self.request("POST", f"/v1/internal/replicas/{segment(copy_id)}/drain")

    async def wake_endpoint(self, endpoint_id: str, reason: str = "") -> WakeResult:
        data = await self.request("POST", f"/v1/endpoints/{segment(endpoint_id)}/wake",
                                  json=body(contracts.WakeRequest(reason=reason)))
        return one(contracts.WakeResult, data)

    async def scale_workflow(self, workflow_id: str, replicas: int) -> WorkflowScaled:
        data = await self.request("POST", f"/v1/workflows/{segment(workflow_id)}/scale",
                                  json=body(contracts.WorkflowScaleRequest(copies=replicas)))
        return one(contracts.WorkflowScaled, data)

    async def endpoint_detail(self, endpoint_id: str) -> EndpointView:
        return one(contracts.EndpointView, await self.request("GET", f"/v1/endpoints/{segment(endpoint_id)}"))

    async def remove_endpoint(self, endpoint_id: str) -> None:
        await self.request("DELETE", f"/v1/internal/endpoints/{segment(endpoint_id)}")

    async def reserve_service_port(self, request: FrontPortRequest) -> FrontPort:
        data = await self.request("POST", "/v1/internal/service-ports", json=request.model_dump(mode="json"))
        return one(contracts.FrontPort, data)

    async def set_endpoint_service(self, update: EndpointFront) -> None:
        await self.request("PUT", f"/v1/internal/endpoints/{segment(update.endpoint_id)}/service",
                           json=update.model_dump(mode="json"))

    async def owner_token(self, user: str, endpoint_id: str | None = None, ttl_s: int = 7 * 24 * 3600
                          ) -> tuple[str, float]:
        """A token speaking for a workflow's owner (API, or bound to one endpoint), for its service."""
        data = await self.request("POST", f"/v1/internal/users/{segment(user)}/tokens",
                                  json=body(contracts.OwnerTokenRequest(endpoint_id=endpoint_id, ttl_s=ttl_s)))
        token = one(contracts.OwnerToken, data)
        return token.token, token.expires_at

    async def note_token_lapse(self, endpoint_id: str, expires_at: float) -> None:
        """Record on a service's own endpoint when the tokens it borrowed lapse, for `describe`."""
        await self.request("PUT", f"/v1/internal/endpoints/{segment(endpoint_id)}/token-lapse",
                           json=body(contracts.TokenLapse(expires_at=expires_at)))

    async def replica_keys_token(self, user: str) -> str:
        """For the gateway a node starts for `user`: reads the keys of the copies `user` may reach."""
        data = await self.request("POST", f"/v1/internal/users/{user}/replica-keys-token")
        return one(contracts.ReplicaKeysToken, data).token

    async def replica_keys(self) -> dict[str, str]:
        """copy id → key of the copies this client's token may call directly (never logged)."""
        return one(contracts.ReplicaKeysList, await self.request("GET", "/v1/internal/replica-keys")).keys

    async def service_token(self, endpoint_id: str) -> str:
        data = await self.request("POST", f"/v1/internal/endpoints/{segment(endpoint_id)}/service-token")
        return one(contracts.ServiceToken, data).token

    # --- identity -----------------------------------------------------------------------------------
    async def create_user(self, name: str, org: str, groups: list[str], admin: bool) -> UserView:
        data = await self.request("POST", "/v1/users",
                                  json=body(contracts.UserRequest(name=name, org=org, groups=groups, admin=admin)))
        return one(contracts.UserView, data)

    async def users(self) -> list[UserView]:
        return many(contracts.UserView, await self.request("GET", "/v1/users"))

    async def create_group(self, name: str, org: str) -> GroupView:
        data = await self.request("POST", "/v1/groups", json=body(contracts.GroupRequest(name=name, org=org)))
        return one(contracts.GroupView, data)

    async def add_member(self, group: str, user: str) -> UserView:
        sent = body(contracts.MemberRequest(user=user))
        data = await self.request("POST", f"/v1/groups/{segment(group)}/members", json=sent)
        return one(contracts.UserView, data)

    async def user_token(self, name: str, expiration: str, note: str = "") -> MintedToken:
        # The note only when given: the body is what it was before notes (tests/berth/test_api_client.py).
        mint = TokenMintBody.model_validate({"expiration": expiration, **({"note": note} if note else {})})
        data = await self.request("POST", f"/v1/users/{segment(name)}/tokens", json=body(mint))
        return one(contracts.MintedToken, data)

    async def tokens(self, user: str | None = None) -> list[TokenRecord]:
        params = {"user": user} if user else {}
        return many(TokenRecord, await self.request("GET", "/v1/tokens", params=params))

    async def revoke_token(self, token_id: str) -> RevokeResult:
        return one(RevokeResult, await self.request("DELETE", f"/v1/tokens/{segment(token_id)}"))

    async def revoke_all_tokens(self, user: str) -> RevokeResult:
        path = f"/v1/users/{segment(user)}/tokens/revoke-all"
        return one(RevokeResult, await self.request("POST", path))

    # --- API keys ---------------------------------------------------------------------------------
    async def create_key(self, request: KeyCreateRequest) -> IssuedKey:
        return one(contracts.IssuedKey, await self.request("POST", "/v1/keys", json=body(request)))

    async def keys(self) -> list[KeyRecord]:
        return many(contracts.KeyRecord, await self.request("GET", "/v1/keys"))

    async def describe_key(self, key_id: str) -> KeyRecord:
        return one(contracts.KeyRecord, await self.request("GET", f"/v1/keys/{segment(key_id)}"))

    async def rotate_key(self, key_id: str, request: KeyRotateRequest) -> IssuedKey:
        return one(contracts.IssuedKey, await self.request("POST", f"/v1/keys/{segment(key_id)}/rotate",
                                                            json=body(request)))

    async def revoke_key(self, key_id: str) -> KeyRecord:
        return one(contracts.KeyRecord, await self.request("DELETE", f"/v1/keys/{segment(key_id)}"))

    async def verify_key(self, request: KeyVerifyRequest) -> KeyVerdict:
        return one(contracts.KeyVerdict, await self.request("POST", "/v1/internal/keys/verify", json=body(request)))

    async def reserve_key_requests(self, key_id: str, requests: int) -> KeyReservation:
        sent = body(contracts.KeyReserveRequest(requests=requests))
        return one(contracts.KeyReservation, await self.request("POST", f"/v1/internal/keys/{segment(key_id)}/reserve",
                                                                 json=sent))

    # --- LiteLLM's key contract, for the endpoint proxy (the client's credential in the body only) ---
    async def litellm_generate_key(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMIssuedKey:
        return one(contracts.LiteLLMIssuedKey, await self._litellm_keys(endpoint_id, "generate", call))

    async def litellm_key_info(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMKeyInfoAnswer:
        return one(contracts.LiteLLMKeyInfoAnswer, await self._litellm_keys(endpoint_id, "info", call))

    async def litellm_delete_keys(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMDeletedKeys:
        return one(contracts.LiteLLMDeletedKeys, await self._litellm_keys(endpoint_id, "delete", call))

    async def litellm_regenerate_key(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMIssuedKey:
        return one(contracts.LiteLLMIssuedKey, await self._litellm_keys(endpoint_id, "regenerate", call))

    async def _litellm_keys(self, endpoint_id: str, action: str, call: LiteLLMKeyCall) -> Any:
        path = f"/v1/internal/endpoints/{segment(endpoint_id)}/litellm-keys/{action}"
        return await self.request("POST", path, json=call.model_dump(mode="json"))

    async def whoami(self) -> UserView:
        return one(contracts.UserView, await self.request("GET", "/v1/whoami"))

    async def routes(self) -> RoutesTable:
        return one(contracts.RoutesTable, await self.request("GET", "/v1/internal/routes"))

    # --- audit chain ------------------------------------------------------------------------------
    async def append_audit(self, batch: AuditBatch) -> AuditAppended:
        # Encoded by pydantic-core in one step: a batch is up to 500 records, posted every half second under load.
        data = await self.request("POST", "/v1/internal/audit", content=batch.model_dump_json(),
                                  headers={"content-type": "application/json"})
        return one(contracts.AuditAppended, data)

    async def audit(self, endpoint_id: str | None = None, key_id: str | None = None, since: float | None = None,
                    limit: int = 100) -> list[AuditRow]:
        params = {k: v for k, v in {"endpoint": endpoint_id, "key": key_id, "since": since}.items() if v is not None}
        return many(contracts.AuditRow, await self.request("GET", "/v1/audit", params={**params, "limit": limit}))

    async def verify_audit(self) -> AuditVerdict:
        return one(contracts.AuditVerdict, await self.request("GET", "/v1/audit/verify"))


def _key_set(data: Any) -> dict[str, Any]:
    return one(contracts.Jwks, data).model_dump(mode="json")
