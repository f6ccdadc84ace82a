"""The shutdown marker: a shutting-down node agent marks its live ranks before stopping them, and the
restarted agent asked to adopt one reads the mark back as "interrupted" (not "lost"), then removes it."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from activities.supervision import (
    RANK_PIDFILE,
    SHUTDOWN_MARKER,
    Supervisor,
    read_shutdown_marker,
    write_shutdown_marker,
)
from berth.processes import remove_file, stop_group_sync, write_pidfile


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen(["sleep", "600"], start_new_session=True)
    try:
        yield process
    finally:
        stop_group_sync(process.pid, 5)
        process.wait()


def test_marks_only_live_ranks(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    supervisor = Supervisor("node-1", tmp_path)
    live, dead = tmp_path / "ranks" / "wf-copy-0-r0", tmp_path / "ranks" / "wf-copy-1-r0"
    write_pidfile(live / RANK_PIDFILE, sleeper.pid)
    finished = subprocess.Popen(["true"])
    finished.wait()
    write_pidfile(dead / RANK_PIDFILE, finished.pid)
    assert supervisor.mark_shutdown() == [live]
    assert read_shutdown_marker(live / SHUTDOWN_MARKER) is not None
    assert not (dead / SHUTDOWN_MARKER).exists()
    assert supervisor.shutdown_marked() == [live]


async def test_adopting_a_rank_stopped_by_shutdown_says_interrupted(tmp_path: Path,
                                                                    sleeper: subprocess.Popen[bytes]) -> None:
    supervisor = Supervisor("node-1", tmp_path)
    run_dir = tmp_path / "ranks" / "wf-copy-0-r0"
    write_pidfile(run_dir / RANK_PIDFILE, sleeper.pid)
    supervisor.mark_shutdown()
    stop_group_sync(sleeper.pid, 5)  # what the shutting-down worker then does, removing the pidfile
    remove_file(run_dir / RANK_PIDFILE)

    adopted = await supervisor.adopt(run_dir / RANK_PIDFILE, "rank 0", tmp_path / "rank.log")

    assert adopted.interrupted and adopted.lost
    assert "its node agent stopped it on shutdown at 20" in adopted.note
    assert not (run_dir / SHUTDOWN_MARKER).exists()  # read once: a later question gets "lost"
    again = await supervisor.adopt(run_dir / RANK_PIDFILE, "rank 0", tmp_path / "rank.log")
    assert again.lost and not again.interrupted


async def test_without_a_marker_a_gone_rank_is_lost(tmp_path: Path) -> None:
    adopted = await Supervisor("node-1", tmp_path).adopt(tmp_path / "ranks" / "x-r0" / RANK_PIDFILE, "rank 0",
                                                         tmp_path / "rank.log")
    assert adopted.lost and not adopted.interrupted
    assert adopted.note == "the restarted node agent found no record of its process"


def test_unclaimed_markers_are_dropped_and_bad_ones_ignored(tmp_path: Path) -> None:
    supervisor = Supervisor("node-1", tmp_path)
    marked = tmp_path / "ranks" / "wf-copy-0-r0"
    marked.mkdir(parents=True)
    write_shutdown_marker(marked / SHUTDOWN_MARKER)
    supervisor.drop_unclaimed_markers(supervisor.shutdown_marked())
    assert supervisor.shutdown_marked() == []
    for text in ("not json", "[1]", '{"stopped_by": "crash", "at": 1}', '{"stopped_by": "shutdown"}'):
        (marked / SHUTDOWN_MARKER).write_text(text)
        assert read_shutdown_marker(marked / SHUTDOWN_MARKER) is None
