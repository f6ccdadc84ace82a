"""LiteLLM's process collects garbage between bytecodes on CPython before 3.12 (gh-148891)."""

from __future__ import annotations

import asyncio
import gc
import signal
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from gateway.litellm_hooks import gc_pacing

REPO_ROOT: Final = Path(__file__).resolve().parents[3]
LITELLM_PYTHON: Final = REPO_ROOT / ".venv-litellm" / "bin" / "python"

# The crash, in pure Python: every allocation may collect (threshold 1); each collection frees a cycle whose
# weakref callback sets context variables, while a `ContextVar.set` is allocating its new HAMT nodes.
WORKLOAD: Final = textwrap.dedent(
    """
    import contextvars, gc, sys, weakref
    from gateway.litellm_hooks import gc_pacing

    paced = sys.argv[1] == "paced"
    pads = [contextvars.ContextVar(f"pad{i}") for i in range(64)]

    class Node:
        pass

    def callback(_ref):
        for pad in pads[:8]:
            pad.set(object())

    def main():
        for pad in pads:
            pad.set(object())
        if paced:
            gc_pacing.take_over_collection()
        gc.set_threshold(1, 1, 1)
        refs = []
        for i in range(300_000):
            node = Node()
            node.me = node
            refs.append(weakref.ref(node, callback))
            del node
            pads[i % 64].set(i)
            if paced and i % 50 == 0:
                gc_pacing.collect_due()
            if len(refs) > 1000:
                refs.clear()
        print("survived")

    contextvars.copy_context().run(main)
    """
)


def workload_python() -> str:
    """LiteLLM's interpreter, the one the pacing runs in (the suite's own where that venv is not built)."""
    return str(LITELLM_PYTHON if LITELLM_PYTHON.exists() else Path(sys.executable))


def run_workload(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [workload_python(), "-c", WORKLOAD, mode], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60,
        check=False,
    )


@pytest.fixture
def automatic_collection_restored() -> Iterator[None]:
    thresholds: Final = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable()


def test_due_generation_follows_cpythons_thresholds() -> None:
    thresholds: Final = (700, 10, 10)
    assert gc_pacing.due_generation((0, 0, 0), thresholds) is None
    assert gc_pacing.due_generation((700, 10, 10), thresholds) is None  # CPython collects past a threshold
    assert gc_pacing.due_generation((701, 0, 0), thresholds) == 0
    assert gc_pacing.due_generation((701, 11, 0), thresholds) == 1
    assert gc_pacing.due_generation((5, 11, 11), thresholds) == 2  # the oldest due generation wins
    assert gc_pacing.due_generation((10**6, 0, 0), (0, 10, 10)) is None  # threshold 0: collection off


def test_only_interpreters_before_3_12_are_paced() -> None:
    assert gc_pacing.needs_pacing((3, 11, 7))
    assert not gc_pacing.needs_pacing((3, 12, 1))
    assert not gc_pacing.needs_pacing((3, 13, 0))


def test_the_workload_survives_paced_collection() -> None:
    paced: Final = run_workload("paced")
    assert paced.returncode == 0, paced.stderr[-2000:]
    assert "survived" in paced.stdout


def test_the_workload_crashes_collection_on_allocation_before_3_12() -> None:
    # The bug this module exists for; if a newer CPython fixes it, the automatic run survives too. A use after free
    # crashes only when the freed memory was reused: nearly every run here (0.05 s each), but a CI run once read
    # the freed nodes intact and survived, so up to five runs are made and one crash is the bug shown.
    printed: Final = subprocess.run(
        [workload_python(), "-c", "import sys; print(*sys.version_info[:3])"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout.split()
    version: Final = tuple(int(part) for part in printed)
    if gc_pacing.needs_pacing(version):
        outcomes = []
        for _ in range(5):
            automatic = run_workload("automatic")
            outcomes.append((automatic.returncode, automatic.stderr[-500:]))
            if automatic.returncode == -signal.SIGSEGV:
                break
        assert outcomes[-1][0] == -signal.SIGSEGV, outcomes
    else:
        automatic = run_workload("automatic")
        assert automatic.returncode == 0, automatic.stderr[-2000:]


async def test_pacing_collects_cyclic_garbage_from_the_event_loop(automatic_collection_restored: None) -> None:
    gc_pacing.take_over_collection()
    assert not gc.isenabled()
    gc.set_threshold(1, 10, 10)  # every tick finds the young generation due

    class Node:
        me: object

    freed: Final = asyncio.Event()
    node = Node()
    node.me = node
    reference: Final = weakref.ref(node, lambda _ref: freed.set())
    del node
    assert reference() is not None, "a cycle outlives its last name while collection is off"

    pacing: Final = asyncio.create_task(gc_pacing.pace(interval_s=0.01))
    try:
        await asyncio.wait_for(freed.wait(), timeout=5)
    finally:
        pacing.cancel()
    assert reference() is None
