"""Revisions and rollouts on a real stack (API, Temporal, control worker, node agents, endpoint proxy; the
engine simulator as the copies): under steady load through the endpoint, non-streamed and streamed, a
rolling update and a blue-green one drop no request and keep the URL; a canary whose new revision fails
pauses by itself and rolls back to all traffic on the old revision; `berth apply` is idempotent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import httpx
import pytest

from tests.support import RunningStack, free_port_base, wait_for

MODEL = "Qwen/Qwen3-0.6B"
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("rollouts"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=2, simulate_gpus="4x80GB",
                           extra_env={"BERTH_SIM_STARTUP_DELAY": "1", "BERTH_SIM_TOKENS_PER_SECOND": "200"})
    running.start()
    try:
        yield running
    finally:
        running.stop()


def start_pool(stack: RunningStack, extra: str = "") -> dict[str, str]:
    workflow_id = stack.start_entry(
        "vLLM", f"Model=hf://{MODEL},GpusPerNode=1,Proxy=false,MinReplicas=2,MaxReplicas=3,DrainGrace=10,"
                f"Scope=user,MaxContextSize=2048{extra}")
    endpoint = stack.endpoint(workflow_id)
    stack.wait_phase(workflow_id, {"ready"}, timeout=120)
    wait_for(lambda: len(ready(stack, workflow_id)) == 2, 60, "2 ready copies")
    return {"workflow_id": workflow_id, "endpoint_id": endpoint["id"], "url": endpoint["url"],
            "token": stack.token_for(endpoint["id"])}


def ready(stack: RunningStack, workflow_id: str) -> list[tuple[str, int]]:
    return [(c["copy_id"], c.get("revision", 1)) for c in stack.describe(workflow_id)["copies"]
            if c["status"] == "ready"]


def rollout(stack: RunningStack, workflow_id: str) -> dict[str, object]:
    answer: dict[str, object] = stack.describe(workflow_id).get("rollout") or {}
    return answer


class Load:
    """Two clients sending one request after another through the endpoint, one non-streamed, one streamed,
    until the block ends; every answer that is not a complete 200 is a failure, kept with what it was."""

    def __init__(self, pool: dict[str, str]) -> None:
        self.pool, self.done = pool, threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._run, args=(stream,), daemon=True) for stream in (False, True)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        wait_for(lambda: self.ok >= 10, 60, "the load to flow")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.done.set()
        for thread in self._threads:
            thread.join(timeout=90)

    def _run(self, stream: bool) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16,
                "stream": stream}
        headers = {"Authorization": f"Bearer {self.pool['token']}"}
        with httpx.Client(timeout=60) as client:
            while not self.done.is_set():
                try:
                    with client.stream("POST", self.pool["url"] + "/v1/chat/completions", json=body,
                                       headers=headers) as response:
                        text = response.read().decode(errors="replace")
                    complete = "[DONE]" in text if stream else bool(json.loads(text).get("choices"))
                    if response.status_code == 200 and complete:
                        self.ok += 1
                    else:
                        self.failures.append(f"{response.status_code} stream={stream}: {text[:200]}")
                except (httpx.HTTPError, ValueError) as error:
                    self.failures.append(f"{type(error).__name__} stream={stream}: {error}")


def finished(stack: RunningStack, workflow_id: str, phase: str, timeout: float = 240) -> dict[str, object]:
    wait_for(lambda: rollout(stack, workflow_id).get("phase") == phase, timeout, f"the rollout to be {phase}")
    return rollout(stack, workflow_id)


@pytest.mark.parametrize("strategy", ["rolling", "blue-green"])
def test_an_update_under_load_drops_no_request_and_keeps_the_url(stack: RunningStack, strategy: str) -> None:
    pool = start_pool(stack)
    wf = pool["workflow_id"]
    with Load(pool) as load:
        out = stack.cli("workflow", "update", wf, "--values", "MaxContextSize=4096", "--strategy", strategy,
                        "--min-ready-seconds", "2", "--rollback-window-seconds", "2", "--no-wait").stdout
        assert "from revision 1 to 2" in out, out
        finished(stack, wf, "complete")
        before = load.ok
        wait_for(lambda: load.ok >= before + 10, 60, "requests served after the rollout")
    assert load.failures == [], load.failures[:5]
    described = stack.describe(wf)
    assert described["revision"] == 2 and {rev for _, rev in ready(stack, wf)} == {2}
    assert stack.endpoint(wf)["url"] == pool["url"]
    definition = stack.api("GET", f"/v1/workflows/{wf}/revisions/2").json()["definition"]
    assert definition["replica"]["engine"]["max_model_len"] == 4096
    # The endpoint's facts followed the serving revision (the limits' context check reads this one).
    def max_context() -> int:
        routes = stack.api("GET", "/v1/internal/routes").json()["endpoints"]
        return int(next(e for e in routes if e["id"] == pool["endpoint_id"])["max_context"])

    wait_for(lambda: max_context() == 4096, 30, "the endpoint's MaxContextSize to follow revision 2")
    revisions = stack.api("GET", f"/v1/workflows/{wf}/revisions").json()
    assert [(r["revision"], r["state"]) for r in revisions] == [(1, "replaced"), (2, "serving")]
    stack.cli("workflow", "stop", wf)


def test_a_failing_canary_pauses_by_itself_and_rollback_restores_the_old_revision(stack: RunningStack) -> None:
    pool = start_pool(stack)
    wf = pool["workflow_id"]
    with Load(pool) as load:
        stack.cli("workflow", "update", wf, "--values", "ExtraArgs=--fail-share 0.5", "--strategy", "canary",
                  "--steps", "20,100", "--step-hold-seconds", "600", "--min-ready-seconds", "1", "--no-wait")
        paused = finished(stack, wf, "paused")
        assert "error rate" in str(paused["paused_reason"]), paused
        assert {int(k): v for k, v in dict(paused["traffic"]).items()} == {1: 100, 2: 0}  # type: ignore[call-overload]
        stack.cli("workflow", "rollout", "rollback", wf)
        finished(stack, wf, "rolled_back")
        load.failures.clear()  # the canary's own failures were the point; from here none
        before = load.ok
        wait_for(lambda: load.ok >= before + 20, 60, "requests served after the rollback")
    assert load.failures == [], load.failures[:5]
    assert stack.describe(wf)["revision"] == 1 and {rev for _, rev in ready(stack, wf)} == {1}
    stack.cli("workflow", "stop", wf)


def test_apply_starts_then_does_nothing_then_rolls(stack: RunningStack, tmp_path: Path) -> None:
    document = {"name": "applied-pool", "entry": "vLLM",
                "values": {"Model": f"hf://{MODEL}", "GpusPerNode": 1, "Proxy": False, "MinReplicas": 1,
                           "MaxReplicas": 2, "Scope": "user"}}
    path = tmp_path / "pool.yaml"
    path.write_text(json.dumps(document))  # JSON is YAML
    assert "created applied-pool" in stack.cli("apply", "-f", str(path)).stdout
    stack.wait_phase("applied-pool", {"ready"}, timeout=120)
    assert "unchanged applied-pool" in stack.cli("apply", "-f", str(path)).stdout
    document["values"]["MaxContextSize"] = 4096  # type: ignore[index]
    document["strategy"] = {"kind": "rolling", "min_ready_s": 1}
    path.write_text(json.dumps(document))
    assert "updated applied-pool" in stack.cli("apply", "-f", str(path)).stdout
    finished(stack, "applied-pool", "complete")
    assert "unchanged applied-pool" in stack.cli("apply", "-f", str(path)).stdout
    stack.cli("workflow", "stop", "applied-pool")
