"""The embedded stack heals itself: a crashed component (endpoint proxy, API, control worker, node agent)
is started again by `berth up`'s supervisor with back-off, `berth status` says so, a restarted node agent
prunes stale rank dirs and /tmp aliases but keeps a live rank, and a clean `berth down` stops everything
with nothing restarted."""

from __future__ import annotations

import hashlib
import os
import signal
from pathlib import Path
from typing import Any

import httpx

from berth.processes import pid_alive
from tests.support import RunningStack, free_port_base, processes_mentioning, rank_record, wait_for

MODEL = "nvidia/some-model"


def _chat(endpoint: dict[str, Any], token: str, timeout: float = 10) -> int:
    try:
        response = httpx.post(endpoint["url"] + "/v1/chat/completions", timeout=timeout,
                              headers={"Authorization": f"Bearer {token}"},
                              json={"model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    except httpx.HTTPError:
        return 0  # nothing listens (yet)
    return response.status_code


def _alias(directory: Path) -> Path:
    """The /tmp alias a node agent makes for a rank's scratch dir (activities/ranks.py)."""
    return Path("/tmp") / f"berth-{hashlib.sha1(str(directory).encode()).hexdigest()[:12]}"


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).is_success
    except httpx.HTTPError:
        return False


def _component(stack: RunningStack, name: str) -> dict[str, Any]:
    status = stack.cli_json("status", "--state-dir", str(stack.state_dir))
    return next(child for child in status["children"] if child["name"] == name)  # type: ignore[no-any-return]


def _kill(stack: RunningStack, name: str) -> int:
    pid = int(_component(stack, name)["pid"])
    os.kill(pid, signal.SIGKILL)  # a crash: no clean-up of any kind
    return pid


def _restarted(stack: RunningStack, name: str, old_pid: int) -> dict[str, Any] | None:
    child = _component(stack, name)
    return child if child["pid"] != old_pid and child["running"] else None


def test_crashed_components_restart_and_down_stops_everything(tmp_path: Path) -> None:
    state = tmp_path / "state"
    stack = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB").start()
    try:
        workflow_id = stack.start_entry("vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false")
        endpoint = stack.endpoint(workflow_id)
        token = stack.token_for(endpoint["id"], "8h")
        assert _chat(endpoint, token) == 200

        # The endpoint proxy crashes: the supervisor keeps its listening socket, so a request sent while
        # nothing serves waits in the backlog (not refused) and is answered by the restarted proxy.
        proxy_pid = _kill(stack, "proxy")
        wait_for(lambda: not pid_alive(proxy_pid), 10, "the proxy to die")
        assert _chat(endpoint, token, timeout=60) == 200
        proxy = _component(stack, "proxy")
        assert proxy["pid"] != proxy_pid and proxy["running"]
        assert proxy["restarts"] == 1 and proxy["last_exit_status"] == -signal.SIGKILL
        assert proxy["last_exit_at"] is not None
        table = stack.cli("status", "--state-dir", str(state)).stdout
        assert "RESTARTS" in table and "LAST EXIT" in table

        # The API and the control worker crash together: both come back and the workflow answers again.
        api_pid, worker_pid = _kill(stack, "api"), _kill(stack, "worker")
        wait_for(lambda: _restarted(stack, "api", api_pid), 30, "the API to be restarted")
        wait_for(lambda: _restarted(stack, "worker", worker_pid), 30, "the control worker to be restarted")
        wait_for(lambda: _answers(stack.info["api_url"] + "/healthz"), 30, "the restarted API to answer")
        assert stack.wait_phase(workflow_id, {"ready"}, timeout=60)["phase"] == "ready"
        assert _component(stack, "api")["last_exit_status"] == -signal.SIGKILL
        assert _component(stack, "worker")["restarts"] == 1
        assert _chat(endpoint, token) == 200

        # The node agent crashes, leaving its live rank and stale leftovers of earlier ranks: the restarted
        # agent prunes the leftovers and keeps what its workflow may still adopt; the copy serves on.
        copy_id = stack.describe(workflow_id)["copies"][0]["copy_id"]
        rank = rank_record(state, copy_id, 0)
        ranks = state / "nodes" / "node-1" / "ranks"
        stale_dir, stale_alias = ranks / "wf-old-copy-0-r0", _alias(ranks / "wf-old-copy-0-r0" / "tmp")
        (stale_dir / "tmp").mkdir(parents=True)
        stale_alias.symlink_to(stale_dir / "tmp", target_is_directory=True)
        node_pid = _kill(stack, "node-1")
        wait_for(lambda: _restarted(stack, "node-1", node_pid), 30, "the node agent to be restarted")
        wait_for(lambda: not stale_dir.exists() and not stale_alias.is_symlink(), 30, "the stale rank dir pruned")
        assert pid_alive(int(rank["pid"])) and _alias(ranks / f"{copy_id}-r0" / "tmp").is_symlink()
        assert (ranks / f"{copy_id}-r0" / "rank.json").exists()
        assert _chat(endpoint, token) == 200

        log = (state / "logs" / "stack" / "supervisor.log").read_text()
        for name in ("proxy", "api", "worker", "node-1"):
            assert f"berth: {name} exited with status -9; restarting it in 0.5 s (restart 1)" in log
    finally:
        stack.stop()
    # A clean `berth down`: every process gone, and the supervisor restarted nothing while stopping.
    assert not (state / "stack.json").exists()
    wait_for(lambda: not processes_mentioning(str(state)), 30, "every process of the stack to exit")
    log = (state / "logs" / "stack" / "supervisor.log").read_text()
    stopping = log.index("berth: stopping the stack")
    assert "restarting it in" not in log[stopping:]
