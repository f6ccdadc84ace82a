"""Endpoint answers: an endpoint with its copies and discovery annotations, a wake-up, an endpoint
token, and the facts a client needs to call one."""

from __future__ import annotations

from berth.contracts.base import OpenResponse, Payload, Renamed, Response, formerly


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
    token: str
    expires_at: float


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
    expiration: str = "8h"


class WakeRequest(Payload):
    reason: str = ""
