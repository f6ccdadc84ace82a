"""The payloads of a pool's rollouts (issue 17) over Temporal: the `roll_to` update that hands a pool its
next revision (signed by the API like a start), and the activities a rollout calls on the control plane."""

from __future__ import annotations

from berth.contracts import Payload, RolloutStrategy
from workflows.payloads import PoolInput


class RolloutRequest(Payload):
    """The `roll_to` update: revision N+1's signed input (same workflow and endpoint IDs, same owner)."""

    revision: int
    input: PoolInput
    strategy: RolloutStrategy = RolloutStrategy()
    by: str = ""


class TrafficInput(Payload):
    """Set an endpoint's split between revisions (None: by copy count)."""

    endpoint_id: str
    weights: dict[int, int] | None = None


class HealthInput(Payload):
    """A revision's health as the endpoint proxies saw it since `since` (epoch seconds)."""

    endpoint_id: str
    revision: int
    since: float


class MoveRequest(Payload):
    """The `move_copies` update (a node drained with a grace): each copy is replaced elsewhere and
    drained — no new requests, in-flight ones get up to the grace — then stopped."""

    copy_ids: tuple[str, ...]
    grace_s: float = 30.0
    reason: str = ""


class ServeInput(Payload):
    """A rollout completed: revision `revision` serves (the endpoint's facts follow it)."""

    workflow_id: str
    revision: int
