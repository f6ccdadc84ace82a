"""The activity stubs (workflows/activity_stubs.py) hold their implementations to them: the workers' classes and
the test fakes register exactly the stubs' names, with the stubs' parameter and result types; and the names,
recorded in every history, stay what they were."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import pytest

from activities.authorization import InputAuthority
from activities.control import ControlActivities
from activities.fronts import FrontActivities
from activities.model_jobs import ModelJobActivities
from activities.model_reports import ModelReportActivities
from activities.ranks import NodeActivities
from activities.slurm_copies import SlurmCopyActivities
from tests.workflows.fake_cluster import FakeCluster
from tests.workflows.fake_models import FakeModels
from workflows import activity_stubs as stubs

# Recorded in histories: a renamed activity fails every running workflow that scheduled the old name.
NAMES = {
    "reserve_placement", "release_placement", "fence_placement", "publish_replica", "unpublish_replica",
    "remove_endpoint", "drain_replica", "reserve_service_port", "set_endpoint_service", "set_traffic",
    "revision_health", "serve_revision", "verify_service_input", "verify_copy_parent", "verify_front_parent",
    "load_model_job", "report_model_state", "use_model", "release_models",
    "run_rank", "adopt_rank", "wait_ready", "download_weights", "delete_ephemeral_volume",
    "run_service", "adopt_service", "wait_live",
    "resolve_model", "download_model", "check_model", "verify_model", "evict_model_cache",
    "submit_slurm_copy", "slurm_copy_state", "wait_slurm_copy_ready", "watch_slurm_copy", "cancel_slurm_copy",
    "watch_slurm_copy_health", "wait_slurm_copy_started",
}
CONTROL_WORKER = (ControlActivities, InputAuthority, ModelReportActivities)
NODE_AGENT = (NodeActivities, FrontActivities, ModelJobActivities)
SLURM = (SlurmCopyActivities,)
TABLES = (*stubs.CONTROL_ACTIVITIES, *stubs.NODE_ACTIVITIES, *stubs.SLURM_ACTIVITIES)
FAKES = (FakeCluster, FakeModels)


def registered_name(function: Callable[..., Any]) -> str | None:
    """The name Temporal registers `function` under, or None when it is no activity."""
    definition = getattr(function, "__temporal_activity_definition", None)
    return None if definition is None else definition.name


def implementations(owner: type) -> dict[str, Callable[..., Any]]:
    """`owner`'s activity methods by their registered names."""
    found: dict[str, Callable[..., Any]] = {}
    for _, method in inspect.getmembers(owner, inspect.isfunction):
        name = registered_name(method)
        if name is not None:
            assert name not in found, f"{owner.__name__} registers {name} twice"
            found[name] = method
    return found


def shape(function: Callable[..., Any]) -> tuple[list[tuple[inspect._ParameterKind, Any]], Any]:
    """The positional parameters' kinds and resolved types (self left out), and the resolved result type."""
    hints = typing.get_type_hints(function)
    parameters = [p for p in inspect.signature(function).parameters.values() if p.name != "self"]
    return [(p.kind, hints.get(p.name)) for p in parameters], hints.get("return")


def stub_shapes() -> dict[str, tuple[list[tuple[inspect._ParameterKind, Any]], Any]]:
    return {stubs.activity_name(stub): shape(stub) for stub in TABLES}


def test_the_stub_names_are_the_recorded_names() -> None:
    names = [stubs.activity_name(stub) for stub in TABLES]
    assert len(set(names)) == len(names)
    assert set(names) == NAMES
    for stub in TABLES:
        assert registered_name(stub) == stubs.activity_name(stub)


@pytest.mark.parametrize(("owners", "table"), [(CONTROL_WORKER, stubs.CONTROL_ACTIVITIES),
                                               (NODE_AGENT, stubs.NODE_ACTIVITIES),
                                               (SLURM, stubs.SLURM_ACTIVITIES)], ids=["control", "node", "slurm"])
def test_the_workers_implement_exactly_their_stubs(owners: tuple[type, ...],
                                                   table: tuple[Callable[..., Any], ...]) -> None:
    expected = stub_shapes()
    registered: dict[str, Callable[..., Any]] = {}
    for owner in owners:
        registered |= implementations(owner)
    assert set(registered) == {stubs.activity_name(stub) for stub in table}
    for name, method in registered.items():
        assert shape(method) == expected[name], f"{method.__qualname__} drifted from its stub {name}"


@pytest.mark.parametrize("fake", FAKES, ids=lambda fake: fake.__name__)
def test_the_fakes_match_their_stubs(fake: type) -> None:
    expected = stub_shapes()
    registered = implementations(fake)
    assert registered and set(registered) <= set(expected), set(registered) - set(expected)
    for name, method in registered.items():
        assert shape(method) == expected[name], f"{method.__qualname__} drifted from its stub {name}"


def test_a_drifted_fake_fails_the_check() -> None:
    """The check itself: a fake whose argument type differs from its stub's is caught."""

    class Drifted:
        @stubs.implements(stubs.release_placement)
        async def release_placement(self, copy_id: int) -> None:
            del copy_id

    [(name, method)] = implementations(Drifted).items()
    assert name == "release_placement" and shape(method) != stub_shapes()[name]


async def test_a_stub_never_runs_as_its_activity() -> None:
    with pytest.raises(stubs.StubCalled):
        await stubs.release_placement("copy")
