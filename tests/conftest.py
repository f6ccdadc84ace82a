"""Shared fixtures and the suite's parallel layout.

`make test` runs the suite under pytest-xdist with `--dist loadgroup`: every test belongs to one group, and a
group runs on one worker, so a stack a module or a profile boots is booted once. A test's group is its stack
profile where it declares one (`@pytest.mark.xdist_group("real-engine")`), else its module (module-scoped
stacks). Each worker draws stack ports from its own slice (BERTH_PORT_SLICE) and writes under its own
basetemp, so workers never collide."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

# The hook stops a profile's stack once its group is done (tests/group_stacks.py); a conftest's hooks are its names.
from tests.group_stacks import SIM_STACK_GROUP, group_of, pytest_runtest_teardown, stop_after_group  # noqa: F401
from tests.slurm_cluster import slurm_cluster  # noqa: F401 — the session's Slurm cluster, for every test module
from tests.support import RunningStack, free_port_base

pytest_plugins = ["tests.group_budget", "tests.settled_heap"]


def pytest_report_header(config: pytest.Config) -> str:
    from berth import compiled

    return f"hot path: {compiled.status()}"


def pytest_configure(config: pytest.Config) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    # xdist sets COLUMNS=80 in its workers; Rich consoles made at import (cli/common.py) would then be 80 wide
    # whatever a test's CliRunner sets, so the CLI's tables wrap differently than in a plain run.
    if worker.startswith("gw"):
        os.environ.pop("COLUMNS", None)
    # A node agent's LiteLLM standby (activities/litellm_standby.py) costs ~7 s of CPU per agent, and the suite
    # starts ~55 agents, most of which never run a LiteLLM: its stacks spawn it at their first LiteLLM start
    # (`lazy`), whose later starts on that agent are forked, unless a test asks for the product's default `on`
    # (tests/activities/test_litellm_standby.py, the chaos smoke's and the copy-loss stacks).
    os.environ.setdefault("BERTH_LITELLM_STANDBY", "lazy")
    if worker.startswith("gw") and count > 1:
        # The stack driver and every process it starts read this: worker K keeps to the K-th port slice.
        os.environ["BERTH_PORT_SLICE"] = f"{int(worker[2:])}/{count}"


# The groups that take longest (docs/performance.md "Test suite"), in that order: xdist hands groups out in
# collection order, so these start first and the short ones fill in around them (longest first, as a scheduler
# would), instead of a 5-minute group starting last on a worker while the others idle.
SLOW_GROUPS_FIRST = (
    "real-engine", "sim-stack", "tests.e2e.test_service_entries", "tests.e2e.test_durability",
    "tests.e2e.test_chaos_smoke", "tests.e2e.test_multinode", "tests.e2e.test_models", "tests.e2e.test_lifecycle",
    "tests.e2e.test_tls", "slurm", "tests.e2e.test_pools", "tests.e2e.test_rollouts",
    "tests.server.test_two_api_processes",
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Before xdist's own hook reads the marks: a module with a test on the shared simulated stack is in its
    # profile's group (one worker boots it, once: in a module's group each, up to four workers booted one each and
    # kept it all run long); any other test with no declared profile keeps to its module's group.
    # A whole module goes with its tests on that stack: its module-scoped fixtures (shared_stack_left_as_found)
    # must not run again, on another worker, for the module's other tests.
    on_shared = {item.module for item in items if SHARED_STACK & set(getattr(item, "fixturenames", ()))}
    for item in items:
        if item.get_closest_marker("xdist_group") is None and item.module in on_shared:
            item.add_marker(pytest.mark.xdist_group(SIM_STACK_GROUP))
        elif item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(item.module.__name__ if item.module else item.nodeid))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        rank = {name: index for index, name in enumerate(SLOW_GROUPS_FIRST)}
        # A stable sort: within a group (and among the rest) the collection order stays.
        items.sort(key=lambda item: rank.get(group_of(item), len(rank)))


# The fixtures that hand a test the shared simulated stack (tests/security/conftest.py adds the last two), and
# the group every test that takes one of them is in.
SHARED_STACK = {"sim_stack", "security_stack", "people"}


@pytest.fixture(scope="module", autouse=True)
def shared_stack_left_as_found(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module on the shared stack stops the workflows it started when it ends: nothing of one module (a
    LiteLLM front of ~390 MB, simulated ranks, GPUs held) stays up for the rest of the session."""
    module = request.module
    if not any(item.module is module and SHARED_STACK & set(getattr(item, "fixturenames", ()))
               for item in request.session.items):
        yield
        return
    stack: RunningStack = request.getfixturevalue("sim_stack")
    before = {row["id"] for row in stack.api("GET", "/v1/workflows").json()}
    yield
    for row in stack.api("GET", "/v1/workflows").json():
        if row["id"] not in before and row["status"].lower() == "running":
            stack.api("POST", f"/v1/workflows/{row['id']}/stop")


@pytest.fixture(autouse=True)
def no_request_id_left_set() -> Iterator[None]:
    """A test that begins a proxy request outside a task sets the request id in its worker's main context; left
    there, every later log line of that worker carries it (a CI run failed on it in an unrelated test)."""
    yield
    from berth.log_format import request_id

    assert request_id.get() is None, "this test left berth.log_format.request_id set in the main context"


@pytest.fixture(scope="session")
def sim_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    """The shared simulated profile (2 nodes × 4×80 GB): each test on it works as its own users, workflows and
    endpoints. Tests that kill, restart or reconfigure components boot a stack of their own."""
    state = Path(tmp_path_factory.mktemp("sim-stack"))
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB")
    stack.start()
    stop_after_group(SIM_STACK_GROUP, stack)
    try:
        yield stack
    finally:
        stack.stop()
