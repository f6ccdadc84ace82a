"""The pool's replacement policy on its own: re-place with doubling back-off up to the budget, drop above
the minimum, fail at it, and fail early when the same exit ends copy after copy."""

from __future__ import annotations

from workflows.healing import SAME_FAILURES_TO_FAIL, Decision, Pacing, Verdict, decide, failure_signature

CRASH = failure_signature("exited", 2, None)
KILLED = failure_signature("exited", None, 9)
PACING = Pacing(budget=3, backoff_s=5.0, backoff_max_s=12.0)


def test_a_failed_copy_is_replaced_with_doubling_capped_back_off() -> None:
    pacing = Pacing(budget=4, backoff_s=5.0, backoff_max_s=12.0)
    waits = [decide([CRASH, KILLED][: 1 + n % 2], n, pacing, 1, 2, "boom").backoff_s for n in range(4)]
    assert waits == [0.0, 5.0, 10.0, 12.0]
    first = decide([CRASH], 0, PACING, 1, 2, "boom")
    assert first.verdict is Verdict.REPLACE
    assert first.reason == "re-placing it now (1 of ReplaceFailedCopies=3 in a row)"
    assert decide([CRASH, KILLED], 1, PACING, 1, 2, "boom").reason.startswith("re-placing it in 5 s (2 of")


def test_the_same_exit_on_consecutive_copies_fails_the_workflow_despite_budget() -> None:
    streak = [CRASH] * SAME_FAILURES_TO_FAIL
    decision = decide(streak, 2, Pacing(budget=100), 1, 2, "rank 0 exited with status 2")
    assert decision.verdict is Verdict.FAIL
    assert decision.reason.startswith("3 copies in a row failed the same way")
    assert decision.reason.endswith("rank 0 exited with status 2")
    # Different exits are not the model failing: placed again while the budget lasts.
    assert decide([CRASH, KILLED, CRASH], 2, PACING, 1, 2, "x").verdict is Verdict.REPLACE


def test_a_spent_budget_drops_above_the_minimum_and_fails_at_it() -> None:
    assert decide([CRASH, KILLED], 3, PACING, 2, 2, "x").verdict is Verdict.DROP
    at_minimum = decide([KILLED], 0, Pacing(budget=0), 0, 1, "rank 1 was killed")
    assert at_minimum == Decision(Verdict.FAIL, reason="a copy failed at the pool minimum (1): rank 1 was killed")
