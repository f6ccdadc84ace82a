"""The failure explanation's decisions without a server (server/explain_failure.py): each recorded end of a copy
with its rank's node, exit status and signal where the pool kept them (None where it did not), the logs a reader
may see, and what a non-owner is not shown."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from berth.contracts.workflows import CopyInfo, CopyStatus, Event, Phase, PoolStatus, RankEnd
from server.access import LOG_TAIL_MARK
from server.explain_failure import LogFile, explain_failure

pytestmark = pytest.mark.timeout(30)
AT = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)


def _status() -> PoolStatus:
    killed = RankEnd(rank=1, node_id="node-2", signal=9, reason="exited")
    return PoolStatus(workflow_id="wf", phase=Phase.READY, desired_copies=1, last_error="wf.copy-0: rank 1 died",
                      copies=(CopyInfo(copy_id="wf.copy-1", status=CopyStatus.READY, nodes=("node-1",)),),
                      events=(Event(at=AT, kind="copy_placed", message="placed", copy_id="wf.copy-0"),
                              Event(at=AT, kind="copy_failed", copy_id="wf.copy-0", ended=killed,
                                    message=f"copy stopped as a unit: rank 1 killed{LOG_TAIL_MARK}\nsecret"),
                              Event(at=AT, kind="copy_interrupted", message="agent stopped (before Berth kept it)",
                                    copy_id="wf.copy-1")))


def _owner(text: str | None) -> str | None:
    return text


def _others(text: str | None) -> str | None:
    return None if text is None else text.partition(LOG_TAIL_MARK)[0]


def test_every_copy_with_its_ends_and_what_is_not_recorded() -> None:
    logs = {"wf.copy-0": [LogFile("vllm-rank-1", ["CUDA error", "Killed"]), LogFile("litellm", None)]}
    answer = explain_failure("wf", None, _status(), None, logs, _owner)
    assert answer.phase == "ready" and [c.copy_id for c in answer.copies] == ["wf.copy-0", "wf.copy-1"]
    failed, interrupted = answer.copies
    assert failed.status is None  # the pool no longer lists it
    [end] = failed.ends  # copy_placed is not an end
    assert (end.kind, end.node, end.rank, end.exit_status, end.signal) == ("copy_failed", "node-2", 1, None, 9)
    assert end.reason.endswith("secret")
    assert [(log.job, log.rank, log.lines) for log in failed.logs] == [("vllm-rank-1", 1, ["CUDA error", "Killed"])]
    assert failed.log_note == "the owner's only (they can hold secrets): litellm"
    [old] = interrupted.ends
    assert (old.node, old.rank, old.exit_status, old.signal) == (None, None, None, None)  # not recorded
    assert (interrupted.status, interrupted.nodes, interrupted.log_note) == (
        "ready", ["node-1"], "no log file recorded for this copy")


def test_one_copy_for_another_reader_and_an_unreadable_pool() -> None:
    answer = explain_failure("wf", "wf.copy-0", _status(), None, {}, _others)
    [copy] = answer.copies
    assert copy.ends[0].reason == "copy stopped as a unit: rank 1 killed" and answer.last_error is not None
    unread = explain_failure("wf", "wf.copy-0", None, "RPCError: is the control worker up?",
                             {"wf.copy-0": [LogFile("vllm-rank-0", ["bye"])]}, _owner)
    assert unread.phase is None and unread.note is not None and "could not be read" in unread.note
    assert [(log.job, log.lines) for log in unread.copies[0].logs] == [("vllm-rank-0", ["bye"])]
