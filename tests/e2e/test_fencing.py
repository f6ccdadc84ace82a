"""Faults never hand a GPU or a port out twice, nor cost a serving copy: a copy lost with its node agent is
placed again elsewhere without spending ReplaceFailedCopies; the lost node's GPU and port stay reserved while
the orphaned rank lives, also once a restarted agent reports in, until that agent has stopped it; readiness
refuses a listener on the copy's port that is not the copy's own rank."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.processes import pid_alive, read_pidfile, stop_group_sync
from berth.settings import StackPorts
from tests.support import REPO, RunningStack, free_port_base, rank_record, wait_for

HEARTBEAT_TIMEOUT_S = 6
ADOPT_WINDOW_S = 6
# The restarted agent's reaper waits heartbeat timeout + adopt window + 10 s before stopping orphans.
REAPER_GRACE_S = HEARTBEAT_TIMEOUT_S + ADOPT_WINDOW_S + 10
MODEL = "nvidia/some-model"
COPY = f"Model=hf://{MODEL},Nodes=1,GpusPerNode=1,Proxy=false,ReplaceFailedCopies=0"  # MinReplicas=1
# A foreign server on the copy's port: answers like a healthy engine serving the same model.
FOREIGN_SERVER = """
import http.server, json, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(sys.argv[3], "a") as seen:  # every credential a prober hands it
            seen.write((self.headers.get("Authorization") or "") + "\\n")
        body = json.dumps({"data": [{"id": sys.argv[2]}]}).encode() if self.path == "/v1/models" else b"ok"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("fencing")) / "state"
    running = RunningStack(
        state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="1x80GB",
        extra_env={
            "BERTH_RANK_HEARTBEAT_TIMEOUT_S": str(HEARTBEAT_TIMEOUT_S),
            "BERTH_RANK_ADOPT_WINDOW_S": str(ADOPT_WINDOW_S),
            "BERTH_NODE_OFFLINE_AFTER_S": "6",
            "BERTH_RESTART_COMPONENTS": "false",  # the test kills and restarts node agents by hand
            # A rank takes a moment to bind its port, as a real engine does: a foreign listener is there first.
            "BERTH_SIM_STARTUP_DELAY": "2",
        },
    ).start()
    replacements: list[subprocess.Popen[bytes]] = []
    running.info["replacements"] = replacements
    try:
        yield running
    finally:
        running.stop()
        for process in replacements:
            if process.poll() is None:
                stop_group_sync(process.pid, 30)
        for record in (state / "nodes").glob("*/ranks/*/rank.json"):  # orphans a test left behind
            found = read_pidfile(record)
            if found is not None and pid_alive(found["pid"]):
                stop_group_sync(found["pid"], 5)


def _agent_pid(stack: RunningStack, node_id: str) -> int:
    return next(int(c["pid"]) for c in stack.info["children"] if c["name"] == node_id)


def _restart_agent(stack: RunningStack, node_id: str) -> None:
    """Start the node agent again with its original id and port block, as systemd would."""
    index = int(node_id.split("-")[1]) - 1
    env = dict(stack.env, BERTH_TEMPORAL_ADDRESS=stack.info["temporal_address"],
               BERTH_API_URL=stack.info["api_url"], BERTH_TOKEN=stack.token)
    argv = ["node", "--id", node_id, "--simulate-gpus", "1x80GB",
            "--port-start", str(StackPorts(stack.port_base).node_ports_start + index * 100)]
    with open(stack.state_dir / f"{node_id}-restarted.log", "ab") as log:
        process = subprocess.Popen([sys.executable, "-m", "cli", *argv], cwd=REPO, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    stack.info["replacements"].append(process)
    stack.info["children"] = [*(c for c in stack.info["children"] if c["name"] != node_id),
                              {"name": node_id, "pid": process.pid}]


def _gpu_holder(stack: RunningStack, node_id: str) -> str | None:
    node = next(n for n in stack.cli_json("node", "list") if n["id"] == node_id)
    return node["gpus"][0]["allocated_to"]  # type: ignore[no-any-return]


def _ready_copy(stack: RunningStack, workflow_id: str) -> dict[str, Any] | None:
    return next((r for r in stack.describe(workflow_id).get("replicas", []) if r["status"] == "ready"), None)


def _kinds(info: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in info["events"]]


def test_readiness_refuses_a_foreign_listener_on_the_copys_port(stack: RunningStack, tmp_path: Path) -> None:
    # Placement packs onto node-1 (ids break the tie) and gives the copy the first port of its block.
    port = StackPorts(stack.port_base).node_ports_start
    seen = tmp_path / "authorization-seen"
    foreign = subprocess.Popen([sys.executable, "-c", FOREIGN_SERVER, str(port), MODEL, str(seen)],
                               start_new_session=True)
    try:
        wait_for(lambda: _answers(port), 30, "the foreign server")
        workflow_id = stack.start_entry("vLLM", COPY, watch=False)
        info = wait_for(lambda: (d := stack.describe(workflow_id))["status"] == "failed" and d, 90,
                        "the workflow to fail")
        assert "copy_placed" in _kinds(info)
        assert "copy_ready" not in _kinds(info)
        assert f"answered, but port {port} is held by another process (not this copy's rank" in info["last_error"]
        assert "the copy is not marked ready" in info["last_error"]
        # It was probed (/health) but never handed the copy's API key.
        assert seen.read_text().splitlines() and not seen.read_text().strip()
    finally:
        stop_group_sync(foreign.pid, 5)


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_lost_agents_copy_moves_and_its_gpu_stays_fenced_until_the_orphan_is_gone(stack: RunningStack) -> None:
    first = stack.start_entry("vLLM", COPY)
    lost_copy = _ready_copy(stack, first)
    assert lost_copy is not None
    orphan = rank_record(stack.state_dir, lost_copy["copy_id"], 0)
    node, other = orphan["node_id"], ({"node-1", "node-2"} - {orphan["node_id"]}).pop()
    os.kill(_agent_pid(stack, node), signal.SIGKILL)  # a crash: the rank lives on, orphaned
    # (b) The copy is lost with its agent and placed again on the other node, the budget untouched.
    moved = wait_for(lambda: (r := _ready_copy(stack, first)) and r["copy_id"] != lost_copy["copy_id"] and r,
                     HEARTBEAT_TIMEOUT_S + ADOPT_WINDOW_S + 120, "the copy to be placed again and serve")
    assert moved["nodes"] == [other]
    info = stack.describe(first)
    assert info["status"] == "running" and info["phase"] == "ready"
    assert "copy_interrupted" in _kinds(info)
    assert not {"copy_failed", "copy_replaced"} & set(_kinds(info))  # ReplaceFailedCopies=0 not spent
    assert _answers(int(moved["url"].rsplit(":", 1)[1]))
    # The lost node's GPU (and port) stay reserved for the lost copy while its orphan lives.
    assert pid_alive(int(orphan["pid"]))
    assert _gpu_holder(stack, node) == lost_copy["copy_id"]
    # (a) The agent comes back. A new workflow must not get the orphan's GPU or port while it lives: the
    # restarted agent reports it held from its first heartbeat and stops it once nobody adopts it.
    _restart_agent(stack, node)
    wait_for(lambda: next(n for n in stack.node_views() if n["id"] == node)["state"] == "ready",
             60, "the restarted agent to report in")
    second = stack.start_entry("vLLM", COPY, watch=False)
    seen_fenced = 0

    def orphan_gone() -> bool:
        nonlocal seen_fenced
        holder = _gpu_holder(stack, node)
        alive = pid_alive(int(orphan["pid"]))  # read after the holder: it was alive when the store was read
        if alive:
            assert holder == lost_copy["copy_id"], f"GPU of {node} handed to {holder} while the orphan lives"
            assert not list((stack.state_dir / "nodes" / node / "ranks").glob(f"{second}.*/rank.json"))
            seen_fenced += 1
        return not alive

    wait_for(orphan_gone, REAPER_GRACE_S + 60, "the restarted agent to stop the orphan", every=0.5)
    assert seen_fenced > 0
    # Once it is gone the fence is lifted: the new workflow gets that GPU, and its port, and serves.
    placed = wait_for(lambda: _ready_copy(stack, second), 90, "the new workflow to serve")
    assert placed["nodes"] == [node]
    assert placed["url"].endswith(f":{orphan['spec']['port']}")
    assert stack.describe(second)["phase"] == "ready"
    for workflow_id in (first, second):
        stack.cli("workflow", "stop", workflow_id, timeout=120)
