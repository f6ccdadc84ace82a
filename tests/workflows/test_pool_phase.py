"""The pool's phase on its own: from its copies, its size and its front process."""

from __future__ import annotations

from tests.workflows.harness import OWNER, TIMINGS, pool_definition
from workflows.payloads import CopyInfo, CopyStatus, Phase, PoolInput
from workflows.pool_phase import next_phase
from workflows.pool_state import PoolState


def pool(proxy: bool = False, *statuses: CopyStatus) -> PoolState:
    state = PoolState(phase=Phase.SCHEDULING)
    state.input = PoolInput(workflow_id="pool-1", endpoint_id="ep-1", owner=OWNER,
                            definition=pool_definition(proxy=proxy), timings=TIMINGS)
    state.copies = {f"pool-1.copy-{i}": CopyInfo(copy_id=f"pool-1.copy-{i}", status=s) for i, s in enumerate(statuses)}
    return state


def test_a_pool_is_ready_once_a_copy_serves() -> None:
    assert next_phase(pool(False)) is Phase.SCHEDULING
    assert next_phase(pool(False, CopyStatus.SCHEDULING, CopyStatus.STARTING)) is Phase.STARTING
    assert next_phase(pool(False, CopyStatus.STARTING, CopyStatus.READY)) is Phase.READY


def test_behind_a_proxy_ready_needs_the_proxy_too() -> None:
    state = pool(True, CopyStatus.READY)
    assert next_phase(state) is Phase.STARTING
    state.service_ready = True
    assert next_phase(state) is Phase.READY


def test_a_pool_of_none_is_scaled_to_zero() -> None:
    state = pool(False)
    state.desired = 0
    assert next_phase(state) is Phase.SCALED_TO_ZERO


def test_downloading_stopping_and_the_ends_are_left_only_by_the_run() -> None:
    for phase in (Phase.DOWNLOADING, Phase.STOPPING, *Phase.terminal()):
        state = pool(False, CopyStatus.READY)
        state.phase = phase
        assert next_phase(state) is phase


def test_a_service_entry_is_ready_when_its_server_is() -> None:
    state = pool(False)
    assert state.input is not None
    state.input = state.input.model_copy(update={"definition": state.input.definition.model_copy(
        update={"replica": None})})
    assert next_phase(state) is Phase.STARTING
    state.service_ready = True
    assert next_phase(state) is Phase.READY
