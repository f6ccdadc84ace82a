"""Endpoint answers: an endpoint with its copies and discovery annotations, a wake-up, an endpoint
token and the records of those minted (never the tokens), and the facts a client needs to call one."""

from __future__ import annotations

from pydantic import Field

from berth.contracts.base import DURATION_PATTERN, OpenResponse, Payload, Renamed, Response, formerly


class CopyView(Response):
    """One published copy of a pool."""

    copy_id: str
    url: str
    ready: bool
    draining: bool


class EndpointAnnotations(OpenResponse):
    """What a discovering gateway reads; `not_discoverable_reason` only for a Proxy=true pool."""

    model_id: str | None = None
    workflow_id: str
    owner: str
    scope: str
    ready: bool
    discoverable: bool
    routing_policy: str | None = None
    not_discoverable_reason: str | None = None


class EndpointView(Response, Renamed):
    """An endpoint with its copies. `ready_replicas` and `replicas` are the old names of `ready_copies` and
    `copies` (deprecated; emitted too for one release)."""

    id: str
    workflow_id: str
    service: str
    url: str
    scope: str
    owner: str
    model_id: str | None = None
    ready: bool
    ready_copies: int = formerly("ready_replicas", "ready_copies")
    copies: list[CopyView] = formerly("replicas", "copies")  # only a discoverable (Proxy=false) pool's
    annotations: EndpointAnnotations

    @property
    def replicas(self) -> list[CopyView]:
        """Deprecated: `copies`, for the readers not yet renamed."""
        return self.copies


class WakeResult(Response):
    endpoint_id: str
    workflow_id: str
    woken: bool
    phase: str


class EndpointToken(Response):
    endpoint_id: str
    token: str = Field(repr=False)
    expires_at: float
    # Its id, for `berth endpoint revoke-token` (absent from a control plane older than the token records).
    id: str | None = None


class EndpointTokenRecord(Response):
    """One endpoint token as `berth endpoint tokens` lists it: facts about it, never the token itself."""

    id: str = Field(description="The token's id (its `jti`): what `berth endpoint revoke-token` takes")
    endpoint_id: str
    user: str = Field(description="Whom the token names: the endpoint proxy admits its holder as this user")
    minted_by: str = Field(description="Who asked for it: the user, or the service that minted it for them")
    minted_at: float
    expires_at: float
    note: str = ""
    revoked: bool
    revoked_at: float | None = None
    revoked_by: str | None = None


class EndpointTokenRevoked(Response):
    """A revocation's answer: the token's record, revoked now or (`already_revoked`) before this call."""

    record: EndpointTokenRecord
    already_revoked: bool


class ServedModel(Response):
    """One model an endpoint serves: the id /v1/models lists, its pool's MaxContextSize (the engine's
    --max-model-len; a model several pools serve: the smallest, since a request may reach any of them),
    and whether it calls tools (--enable-auto-tool-choice; several pools: only if all do)."""

    model_id: str
    max_context: int
    tool_calling: bool


class EndpointClientFacts(Response):
    """What OpenCode or an SDK needs: URL, the model id /v1/models lists, its context, tool calling.

    `models` lists every model the endpoint serves: a model endpoint its one, a gateway each model of the
    pools it discovers. For a gateway, `model_id`, `max_context` and `tool_calling` are those of its default
    model (berth.opencode.default_model's choice), for the readers of one model."""

    endpoint_id: str
    workflow_id: str
    url: str
    scope: str
    model_id: str
    max_context: int
    tool_calling: bool
    proxy: bool
    models: list[ServedModel] = []


# --- requests ------------------------------------------------------------------------------------------
class EndpointTokenRequest(Payload):
    expiration: str = Field("8h", json_schema_extra={"pattern": DURATION_PATTERN})  # berth/tokens.parse_duration
    note: str = Field("", max_length=200)  # why it exists, shown by `berth endpoint tokens`


class WakeRequest(Payload):
    reason: str = ""
