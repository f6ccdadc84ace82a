"""Replacement policy of a replica pool: after a copy failed, place it again (after a back-off), drop it,
or fail the workflow. A pure decision (no Temporal), so PoolWorkflow stays deterministic and the rules
are tested on their own."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

# The model itself keeps failing (not a node, not an operator's kill): the same exit ended this many
# copies in a row, none of them ready in between. Three, as Kubernetes' failureThreshold and
# CrashLoopBackOff's first plateau: one is bad luck, two a coincidence, three the model.
SAME_FAILURES_TO_FAIL = 3


class Verdict(str, Enum):
    REPLACE = "replace"  # place a new copy after `backoff_s`
    DROP = "drop"  # the pool was above its minimum: shrink it by one copy
    FAIL = "fail"  # fail the workflow (and stop every copy)


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    backoff_s: float = 0.0
    reason: str = ""


@dataclass(frozen=True)
class Pacing:
    """How a pool re-places failed copies: up to `budget` in a row, `backoff_s` doubling to `backoff_max_s`."""

    budget: int
    backoff_s: float = 5.0
    backoff_max_s: float = 120.0


def failure_signature(reason: str, exit_code: int | None, signal: int | None) -> str:
    """How a copy ended, without what differs from copy to copy (its id, node, log lines)."""
    return f"{reason}/exit={exit_code}/signal={signal}"


def decide(streak: Sequence[str], replaced: int, pacing: Pacing, remaining: int, minimum: int,
           message: str) -> Decision:
    """What to do after a copy failed.

    `streak`: the signatures of the copies that failed since a copy last became ready, this one last;
    `replaced`: how many of them were placed again; `remaining`: copies still running besides it."""
    tail = streak[-SAME_FAILURES_TO_FAIL:]
    if len(tail) == SAME_FAILURES_TO_FAIL and len(set(tail)) == 1:
        return Decision(Verdict.FAIL, reason=f"{SAME_FAILURES_TO_FAIL} copies in a row failed the same way "
                        f"without one becoming ready; the model keeps failing: {message}")
    if replaced < pacing.budget:
        # As Kubernetes restarts a crashed container: the first at once (a one-off crash costs only the
        # start-up: docs/performance.md measures it), then waits doubling while the failures go on.
        backoff = 0.0 if replaced == 0 else min(pacing.backoff_s * 2 ** (replaced - 1), pacing.backoff_max_s)
        when = f"in {backoff:g} s" if backoff else "now"
        return Decision(Verdict.REPLACE, backoff_s=backoff,
                        reason=f"re-placing it {when} ({replaced + 1} of ReplaceFailedCopies={pacing.budget} "
                        "in a row)")
    if remaining >= minimum:
        return Decision(Verdict.DROP, reason=f"dropped; the pool was above its minimum ({remaining + 1} > "
                        f"MinReplicas={minimum}); a later scale-up replaces it")
    return Decision(Verdict.FAIL, reason=f"a copy failed at the pool minimum ({minimum}): {message}")
