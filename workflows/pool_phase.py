"""A pool's phase, decided from its copies and its front process (pure: no Temporal call)."""

from __future__ import annotations

from workflows.front_supervisor import fronted
from workflows.payloads import CopyStatus, Phase
from workflows.pool_state import PoolState


def next_phase(state: PoolState) -> Phase:
    """The phase the pool is in now; downloading, stopping and the ends are left only by the workflow's run."""
    if state.phase in (Phase.DOWNLOADING, Phase.STOPPING) or state.phase in Phase.terminal():
        return state.phase
    if state.input is not None and state.input.definition.replica is None:
        # A service entry (gateway, OpenCode) has no pool: its one server is the whole workflow.
        return Phase.READY if state.service_ready else Phase.STARTING
    statuses = {c.status for c in state.copies.values()}
    # Ready means a client can be served: behind a LiteLLM proxy, that needs the proxy too.
    behind_proxy = state.input is not None and fronted(state.input)
    if CopyStatus.READY in statuses and (state.service_ready or not behind_proxy):
        return Phase.READY
    if CopyStatus.READY in statuses or CopyStatus.STARTING in statuses:
        return Phase.STARTING
    if state.desired == 0:
        return Phase.SCALED_TO_ZERO
    return Phase.SCHEDULING


def update_phase(state: PoolState) -> None:
    state.phase = next_phase(state)
