"""Test helpers: the stack driver (stack/driver.py, shared with the demo and the benchmarks) and what
only the tests need."""

import os
from pathlib import Path

from activities.rank_identities import FIRST_UID, UID_COUNT
from berth.settings import StateLayout
from stack.driver import (
    REPO,
    RunningStack,
    add_node_agent,
    free_port_base,
    gpus_held,
    litellm_bin,
    opencode_bin,
    ports_free,
    process_environment,
    processes_mentioning,
    rank_record,
    service_record,
    start_gateway,
    wait_for,
)

__all__ = [
    "REPO", "SMOLLM2_QUESTION", "RunningStack", "add_node_agent", "free_port_base", "gpus_held", "litellm_bin",
    "opencode_bin", "ports_free", "process_environment", "processes_mentioning", "rank_record", "service_record",
    "start_gateway", "wait_for", "runs_as_the_rank_user_seeing_no_key",
]

# The question the real SmolLM2 (a Q4_1 approximation, greedy) is asked. Plain "What is the capital of
# France?" starts "The" only 0.12 nats ahead of "L'…", so another CPU's kernels can tip it into French
# (seen in CI: "L'Étoile, la Marseillaise…"); asking for an English sentence puts "Paris" 2.1 nats ahead.
SMOLLM2_QUESTION = "What is the capital of France? Answer in one short English sentence."


def runs_as_the_rank_user_seeing_no_key(pid: int, state_dir: Path) -> None:
    """Issue 29: a rank runs as its workflow's rank user, in a mount namespace where the state dir holds its way to
    its run dir and nothing of the keys or the admin token's file (read through /proc/PID/root: the rank's own view).
    A stack not run as root runs ranks as its own user (documented): then only the rank's environment protects the
    keys."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = int(next(line for line in status if line.startswith("Uid:")).split()[1])
    if os.geteuid() != 0:
        assert uid == os.geteuid()
        return
    assert FIRST_UID <= uid < FIRST_UID + UID_COUNT  # its workflow's own rank uid (activities/rank_identities.py)
    seen = Path(f"/proc/{pid}/root")
    keys = StateLayout(state_dir).keys
    assert keys.is_dir() and any(keys.iterdir())  # the agent's view: the keys are there
    assert not (seen / keys.relative_to("/")).exists()
    assert not (seen / state_dir.relative_to("/") / "client.json").exists()
    assert (seen / state_dir.relative_to("/") / "nodes").is_dir()  # its run dir's way in
