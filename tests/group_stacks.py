"""A profile's session stack stopped when its xdist group is done, not when the worker's session ends.

Under `--dist loadgroup` a group's tests reach one worker together and run there in one stretch, so once a test is
followed by one of another group (or by none), no test of its group comes after it on that worker. An idle stack
costs ~6 % of a core (a real-engine one more), and a worker goes on for many minutes after its profile's group: a
fixture that registers its stack here (`stop_after_group`) has it stopped then. In a plain run the groups
interleave, so there the stack waits for the session's end."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support import RunningStack

SIM_STACK_GROUP = "sim-stack"  # every test that takes the shared simulated stack (tests/conftest.py)

_GROUP_STACKS: dict[str, list[RunningStack]] = {}


def stop_after_group(group: str, stack: RunningStack) -> None:
    """Stop `stack` after `group`'s last test on this worker (xdist); its fixture's own stop then finds it down."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        _GROUP_STACKS.setdefault(group, []).append(stack)


def group_of(item: pytest.Item) -> str:
    """The xdist group a test is in (tests/conftest.py gives every test one)."""
    mark = item.get_closest_marker("xdist_group")
    return str(mark.args[0]) if mark and mark.args else ""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    yield  # the item's own teardown first: a module's fixtures may still use the stack (shared_stack_left_as_found)
    group = group_of(item)
    if group in _GROUP_STACKS and (nextitem is None or group_of(nextitem) != group):
        for stack in _GROUP_STACKS.pop(group):
            stack.stop()
