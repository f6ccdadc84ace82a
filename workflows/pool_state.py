"""PoolState: everything a PoolWorkflow knows about its pool (its one state model), with the self-healing
verdicts on it, and its round trip through PoolCarry (the wire format) when the workflow continues as new."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from berth.contracts import Rollout
    from workflows.healing import SAME_FAILURES_TO_FAIL, Pacing, Verdict, decide, failure_signature
    from workflows.model_payloads import ModelUpdate
    from workflows.payloads import (
        CopyInfo,
        CopyResult,
        CopyStatus,
        Event,
        Phase,
        PoolCarry,
        PoolInput,
        RankEnd,
        WeightsResult,
    )

MAX_EVENTS = 200


def _when(event: Event) -> datetime:
    at = event.at
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # a naive time must not fail the task


@dataclass
class PoolState:
    phase: Phase = Phase.DOWNLOADING
    events: list[Event] = field(default_factory=list)
    copies: dict[str, CopyInfo] = field(default_factory=dict)
    desired: int = 1
    next_copy: int = 0
    replaced_failures: int = 0
    # Self-healing pools ("pool-self-healing"): how the copies that failed since one was last ready ended,
    # how many of them were placed again, and until when the next replacement waits (back-off).
    failure_streak: list[str] = field(default_factory=list)
    streak_replaced: int = 0
    replace_paused_until: datetime | None = None
    last_error: str | None = None
    weights: WeightsResult | None = None
    stop_requested: bool = False
    finished: dict[str, CopyResult] = field(default_factory=dict)
    draining: list[str] = field(default_factory=list)  # copies being scaled in (no new requests)
    service_ready: bool = False  # the endpoint's own front process (LiteLLM) is live and routed to
    service_restarts: int = 0
    # Revisions (issue 17): the one the pool serves, each copy's (a copy not listed serves `revision`),
    # since when each copy is ready (a new copy counts for a rollout once ready MinReady), the current or
    # last rollout and, while one runs, the sizes it wants (old revision's, new revision's).
    revision: int = 1
    revision_of: dict[str, int] = field(default_factory=dict)
    ready_since: dict[str, datetime] = field(default_factory=dict)
    rollout: Rollout | None = None
    want: tuple[int, int] | None = None
    rolled_back: list[int] = field(default_factory=list)  # revisions rolled back (never served), newest last
    # The inputs: the serving revision's (a completed rollout replaces it) and where its weights are; while a
    # rollout runs, the revision rolled to, its weights and where they are.
    input: PoolInput | None = None
    model_dir: str = ""
    target: PoolInput | None = None
    target_model_dir: str = ""
    target_weights: WeightsResult | None = None
    # Continue-as-new: this run resumes a carried state (`continued_run`) after `continued` earlier runs; the
    # copies an earlier run started (their end arrives as copy_finished), those whose child workflow this run
    # started, and the copies' last words (copy_finished) not yet handled.
    continued_run: bool = False
    continued: int = 0
    attached: set[str] = field(default_factory=set)
    started: set[str] = field(default_factory=set)
    reported: dict[str, CopyResult] = field(default_factory=dict)
    # The front process: a child FrontWorkflow (`new_shape`, "front-child-and-continue-as-new"; copies are
    # abandoned, not cancelled, and the pool continues as new) or inline, as older histories replay it.
    new_shape: bool = False
    front_id: str | None = None
    front_stopping: bool = False
    front_started: bool = False
    front_ended: bool = False
    front_error: str | None = None  # a fatal configuration error ends a service entry's workflow
    # What the pool loop and the rollout driver wait on: one nudge flag each, so neither swallows the other's
    # wake-up; copies to move off a drained node (with their grace); the grace of the drains the next scale-in
    # starts; the traffic split last sent to the endpoint; the model job's latest step (`model_update`).
    pool_nudged: bool = False
    driver_nudged: bool = False
    moves: list[tuple[str, float]] = field(default_factory=list)
    next_grace_s: float | None = None
    traffic_set: dict[int, int] | None = None
    model_news: ModelUpdate | None = None

    def append(self, event: Event) -> None:
        # Listed by when each happened, not by arrival: a copy's report can wait in its outbox while the
        # adopting agent signals straight away (rank_readopted arrived before the rank_unresponsive it
        # answers). Equal times keep their arrival order.
        bisect.insort_right(self.events, event, key=_when)
        del self.events[:-MAX_EVENTS]

    def event(self, kind: str, message: str, copy_id: str | None = None, ended: RankEnd | None = None) -> None:
        self.append(Event(at=workflow.now(), kind=kind, message=message, copy_id=copy_id, ended=ended))

    def nudge(self) -> None:
        """Something the pool loop and the rollout driver wait on changed: wake both."""
        self.pool_nudged = self.driver_nudged = True

    def serving(self) -> PoolInput:
        """The serving revision's input (set before any handler runs)."""
        assert self.input is not None
        return self.input

    def source(self, revision: int) -> tuple[PoolInput, str]:
        """The input and weights a new copy of `revision` is started from."""
        if self.target is not None and revision != self.revision:
            return self.target, self.target_model_dir
        return self.serving(), self.model_dir

    def carry(self, running: tuple[str, ...], model_dir: str) -> PoolCarry:
        """The state the next run resumes: the running copies (and the front child, unless it ended) by ID."""
        front_id = None if self.front_ended else self.front_id
        return PoolCarry(
            phase=self.phase, events=tuple(self.events), copies=tuple(self.copies.values()), running=running,
            draining=tuple(self.draining), desired=self.desired, next_copy=self.next_copy,
            replaced_failures=self.replaced_failures, failure_streak=tuple(self.failure_streak),
            streak_replaced=self.streak_replaced, replace_paused_until=self.replace_paused_until,
            last_error=self.last_error, weights=self.weights, model_dir=model_dir,
            service_ready=self.service_ready, service_restarts=self.service_restarts, front_id=front_id,
            continued=self.continued, revision=self.revision,
            revision_of={c: r for c, r in self.revision_of.items() if c in running},
            ready_since={c: t for c, t in self.ready_since.items() if c in running}, rollout=self.rollout,
            rolled_back=tuple(self.rolled_back),
            reported=tuple(r for c, r in self.reported.items() if c in running),
        )

    @staticmethod
    def carried(carry: PoolCarry) -> PoolState:
        return PoolState(
            phase=carry.phase, events=list(carry.events), copies={c.copy_id: c for c in carry.copies},
            desired=carry.desired, next_copy=carry.next_copy, replaced_failures=carry.replaced_failures,
            failure_streak=list(carry.failure_streak), streak_replaced=carry.streak_replaced,
            replace_paused_until=carry.replace_paused_until, last_error=carry.last_error, weights=carry.weights,
            draining=list(carry.draining), service_ready=carry.service_ready,
            service_restarts=carry.service_restarts, revision=carry.revision, revision_of=dict(carry.revision_of),
            ready_since=dict(carry.ready_since), rollout=carry.rollout, rolled_back=list(carry.rolled_back),
            new_shape=True, attached=set(carry.running), reported={r.copy_id: r for r in carry.reported},
            continued=carry.continued + 1,
        )

    # --- how a pool answers a copy's end ------------------------------------------------------------
    def on_copy_finished(self, result: CopyResult, remaining: int, minimum: int, replace_budget: int) -> None:
        if result.status is CopyStatus.INTERRUPTED:
            self.event("copy_interrupted", f"{result.copy_id}: {result.message}; placing it again", result.copy_id,
                       result.rank_end())
            return  # desired unchanged: the loop places a fresh copy
        if result.status is not CopyStatus.FAILED:
            return
        self.last_error = f"{result.copy_id}: {result.message}"
        self.event("copy_failed", result.message, result.copy_id, result.rank_end())
        if self.replaced_failures < replace_budget:
            self.replaced_failures += 1
            self.event("copy_replaced", f"re-placing {result.copy_id} "
                       f"({self.replaced_failures} of ReplaceFailedCopies={replace_budget})")
            return
        if remaining >= minimum:  # the pool was above its minimum: drop the copy
            self.desired = remaining
            self.event("copy_dropped", f"{result.copy_id} dropped; the pool was above its minimum "
                       f"({remaining + 1} > MinReplicas={minimum}); a later scale-up replaces it")
            return
        raise ApplicationError(f"a copy failed at the pool minimum ({minimum}): {result.message}",
                               type="CopyFailed", non_retryable=True)

    def replace_pause(self) -> timedelta | None:
        """How long a replacement still waits (its back-off), or None when it may be placed now."""
        until = self.replace_paused_until
        if until is None or until <= workflow.now():
            self.replace_paused_until = None
            return None
        return until - workflow.now()

    def on_copy_failed(self, result: CopyResult, remaining: int, input: PoolInput) -> None:
        """A self-healing pool: re-place a failed copy (bounded, with back-off) while the other copies serve;
        fail the workflow only when the model itself keeps failing or the pool is spent at its minimum."""
        if result.status is not CopyStatus.FAILED:
            self.on_copy_finished(result, remaining, 0, 0)  # interrupted: placed again; stopped: nothing
            return
        self.last_error = f"{result.copy_id}: {result.message}"
        self.event("copy_failed", result.message, result.copy_id, result.rank_end())
        exit_info = result.failure
        streak = self.failure_streak
        streak.append(failure_signature(exit_info.reason, exit_info.exit_code, exit_info.signal)
                      if exit_info is not None else "never-ready")
        del streak[:-SAME_FAILURES_TO_FAIL]
        pool, timings = input.definition.pool, input.timings
        pacing = Pacing(pool.replace_failed_copies, timings.replace_backoff_s, timings.replace_backoff_max_s)
        decision = decide(streak, self.streak_replaced, pacing, remaining, pool.min_replicas, result.message)
        if decision.verdict is Verdict.REPLACE:
            self.streak_replaced += 1
            self.replaced_failures += 1
            self.replace_paused_until = workflow.now() + timedelta(seconds=decision.backoff_s)
            self.event("copy_replaced", f"{result.copy_id}: {decision.reason}", result.copy_id)
        elif decision.verdict is Verdict.DROP:
            self.desired = remaining
            self.event("copy_dropped", f"{result.copy_id} {decision.reason}", result.copy_id)
        else:
            raise ApplicationError(decision.reason, type="CopyFailed", non_retryable=True)
