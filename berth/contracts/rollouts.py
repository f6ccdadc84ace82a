"""Revisions and rollouts (issue 17): a workflow's revisions, how it rolls from one to the next (rolling,
canary, blue-green), the commands that steer a rollout, draining a pool with a grace, the traffic split
the endpoint proxy enforces, the per-revision health a canary is judged by, and why the autoscaler
sized a pool as it did. The rollout's state is a Temporal payload too: the pool's `status` query
answers it and `describe` carries it, so its field names are wire names twice over."""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from typing import Any

from pydantic import Field, field_validator

from berth.contracts.base import INT64_MAX, Payload, Response
from berth.contracts.choices import RolloutAction, RolloutKind  # re-exported: defined apart for the CLI

MAX_STEPS = 20


class RolloutStrategy(Payload):
    """How a new revision replaces the serving one (the `berth workflow update` options)."""

    kind: RolloutKind = RolloutKind.ROLLING
    max_surge: int = Field(default=1, ge=1, le=64)  # rolling: new copies above the desired size at once
    max_unavailable: int = Field(default=0, ge=0, le=64)  # rolling: copies below the desired size at once
    min_ready_s: float = Field(default=10.0, ge=0, le=3600)  # a new copy counts once ready this long
    steps: tuple[int, ...] = (5, 20, 50, 100)  # canary: percent of traffic to the new revision
    step_hold_s: float = Field(default=60.0, ge=0, le=86_400)  # canary: each step held this long, judged meanwhile
    max_error_rate: float = Field(default=0.05, ge=0, le=1)  # canary: above this share of failed requests → pause
    max_ttft_ms: float = Field(default=0.0, ge=0)  # canary: mean time to first token above this → pause (0: off)
    min_requests: int = Field(default=10, ge=1, le=1_000_000)  # canary: judge the error rate only past this many
    rollback_window_s: float = Field(default=300.0, ge=0, le=86_400)  # blue-green: the old set kept this long

    @field_validator("steps")
    @classmethod
    def _steps(cls, steps: tuple[int, ...]) -> tuple[int, ...]:
        if not steps or len(steps) > MAX_STEPS:
            raise ValueError(f"steps: give 1 to {MAX_STEPS} percentages, e.g. 5,20,50,100")
        if any(not 1 <= s <= 100 for s in steps) or list(steps) != sorted(set(steps)):
            raise ValueError("steps: percentages from 1 to 100, each above the one before, e.g. 5,20,50,100")
        if steps[-1] != 100:
            raise ValueError("steps: the last step must be 100 (all traffic to the new revision)")
        return steps


class RolloutPhase(str, Enum):
    PREPARING = "preparing"  # the new revision's weights are being fetched
    ROLLING = "rolling"  # rolling: copies being replaced one surge at a time
    SHIFTING = "shifting"  # canary: traffic moving in steps
    BUILDING = "building"  # blue-green: the new set starting, no traffic yet
    SWITCHED = "switched"  # blue-green: all traffic on the new set, the old kept for the rollback window
    PAUSED = "paused"  # by hand or by the canary's judgement; `resume`, `promote` or `rollback`
    ROLLING_BACK = "rolling_back"  # traffic back on the old revision, the new set draining
    COMPLETE = "complete"
    ROLLED_BACK = "rolled_back"

    @staticmethod
    def finished() -> frozenset[RolloutPhase]:
        return frozenset({RolloutPhase.COMPLETE, RolloutPhase.ROLLED_BACK})


class Rollout(Payload):
    """A pool's rollout from one revision to the next, as the workflow drives it."""

    from_revision: int
    to_revision: int
    strategy: RolloutStrategy = RolloutStrategy()
    phase: RolloutPhase
    step: int = 0  # canary: index into strategy.steps
    traffic: dict[int, int] = {}  # revision → percent the endpoint proxy sends it; {} = by copy count
    paused_reason: str = ""
    message: str = ""  # what it is waiting for, in one line
    by: str = ""  # who asked for the new revision
    started_at: datetime
    updated_at: datetime
    # Its clock and its memory (so that a restarted worker, replaying, continues the phase it was in):
    step_started_at: datetime | None = None  # canary: when the current step's traffic was set
    switched_at: datetime | None = None  # blue-green (and a promotion): when all traffic moved
    resume_phase: RolloutPhase | None = None  # paused: the phase `resume` returns to
    promoted: bool = False  # `promote`: finish now, whatever the strategy


class RolloutCommand(Payload):
    action: RolloutAction
    by: str = ""


# --- REST ------------------------------------------------------------------------------------------------
class WorkflowUpdateRequest(Payload):
    """`berth workflow update WF --values …`: the values that change (the rest are the serving revision's)."""

    values: dict[str, Any] = {}
    strategy: RolloutStrategy = RolloutStrategy()


class WorkflowUpdated(Response):
    id: str
    revision: int
    url: str
    message: str
    rollout: Rollout | None = None  # None: the values equal the serving revision's; nothing to roll


class WorkflowRevision(Response):
    """One revision as `berth workflow revisions` lists it."""

    workflow_id: str
    revision: int
    entry: str
    values: dict[str, Any]  # the values as given (secrets are references, never their values)
    by: str
    at: float
    strategy: str = "rolling"
    state: str = ""  # serving | rolling out | rolled back | replaced (from the workflow's status)


class WorkflowRevisionDefinition(Response):
    id: str
    revision: int
    entry: str
    definition: dict[str, Any]


class WorkflowDrainRequest(Payload):
    """`berth workflow drain WF --grace-seconds N`: no new requests to the copies above the minimum, their
    in-flight ones get up to the grace, then the pool is at its minimum."""

    grace_s: float = Field(default=30.0, ge=0, le=3600)


class TrafficSplit(Payload):
    """The share of an endpoint's requests each revision's copies get (percent, summing to 100);
    None: every ready copy alike, whatever its revision."""

    weights: dict[int, int] | None = None


class ServedRevision(Payload):
    """A rollout completed: this revision serves (the endpoint's facts follow it)."""

    revision: int = Field(ge=1)


class CopyOutcomes(Payload):
    """What one endpoint proxy saw of one copy since its last load report."""

    requests: int = Field(default=0, ge=0, le=INT64_MAX)
    errors: int = Field(default=0, ge=0, le=INT64_MAX)  # answered 5xx, or failed before an answer
    ttft_sum_s: float = Field(default=0.0, ge=0)  # time to the first byte of the copy's answer, summed
    ttft_count: int = Field(default=0, ge=0, le=INT64_MAX)


class RevisionHealth(Response):
    """A revision's copies as the endpoint proxies saw them since a time: what a canary is judged on."""

    revision: int
    requests: int = 0
    errors: int = 0
    error_rate: float = 0.0
    ttft_ms: float | None = None  # mean time to first byte; None: nothing measured
    copies: int = 0


class ScalingSignal(Response):
    queue_depth: float | None = None  # waiting requests per ready copy (vllm:num_requests_waiting), mean
    in_flight: float | None = None  # running + waiting per ready copy, mean (what TargetConcurrency sizes)
    ttft_ms: float | None = None  # mean time to first token of the ready copies, recent
    rate_rps: float = 0.0
    ready_copies: int = 0
    fresh_copies: int = 0  # ready copies whose /metrics answered recently
    stale_copies: list[str] = []


class ScalingExplanation(Response):
    """`berth workflow explain-scaling WF`: what the autoscaler last measured and decided, and why."""

    workflow_id: str
    at: float
    desired: int
    decision: str  # scale_out | scale_in | hold | steady
    reason: str
    signal: ScalingSignal = ScalingSignal()
    policy: dict[str, Any] = {}
