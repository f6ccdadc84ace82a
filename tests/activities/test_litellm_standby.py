"""The node agent's LiteLLM standby (activities/litellm_standby.py, gateway/litellm_hooks/standby.py) with the real
LiteLLM: imported ahead, it becomes the next LiteLLM launch and serves within seconds; a launch it cannot be
exactly is started cold; it never outlives the agent that spawned it; BERTH_LITELLM_STANDBY turns it off."""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import httpx
import pytest
from pydantic import SecretStr

from activities.front_launch import FrontLaunch
from activities.litellm_service import LIVENESS_PATH, LiteLLMServiceSpec, prepare_launch
from activities.litellm_standby import STANDBY_LOG, LiteLLMStandby
from berth.settings import litellm_standby_enabled
from gateway.litellm_hooks.standby import READY_LINE
from tests.gateway.litellm_hooks.test_litellm_proxy import free_port, litellm_executable

pytestmark = pytest.mark.litellm
IMPORT_WITHIN_S: Final = 120.0  # ~6 s alone; a 2-core machine running the suite's four workers is slower
# Issue 33's goal is 3 s on a quiet machine (0.5 s measured); this bound leaves room for a loaded one.
SERVE_WITHIN_S: Final = 10.0


async def wait_for(predicate: object, timeout_s: float, what: str) -> float:
    started = time.monotonic()
    while not predicate():  # type: ignore[operator]
        if time.monotonic() - started > timeout_s:
            pytest.fail(f"{what} not within {timeout_s:.0f} s")
        await asyncio.sleep(0.1)
    return time.monotonic() - started


def imported(directory: Path, times: int = 1) -> bool:
    log = directory / STANDBY_LOG
    return log.exists() and log.read_text(errors="replace").count(READY_LINE) >= times


def launch_for(workdir: Path, key: str, executable: str) -> FrontLaunch:
    spec = LiteLLMServiceSpec(model_name="openai/standby", master_key=SecretStr(key), port=free_port(),
                              replicas_url=f"http://127.0.0.1:{free_port()}/replicas")
    launch = prepare_launch(spec, workdir, executable)
    return FrontLaunch(argv=launch.argv, environment=launch.environment, working_directory=launch.working_directory)


@pytest.fixture
def executable(monkeypatch: pytest.MonkeyPatch) -> str:
    found = litellm_executable()
    monkeypatch.setenv("BERTH_LITELLM_BIN", found)  # the standby stands in for the same one
    return found


async def test_a_standby_becomes_the_launch_and_serves_within_seconds(tmp_path: Path, executable: str) -> None:
    standby = LiteLLMStandby(tmp_path / "standby", enabled=True)
    standby.warm()
    try:
        await wait_for(lambda: imported(tmp_path / "standby"), IMPORT_WITHIN_S, "the standby's imports")
        spare = standby.spare_pid
        key = f"sk-berth-{secrets.token_urlsafe(16)}"
        launch = launch_for(tmp_path / "front", key, executable)
        # A launch under another executable is not this standby's to become: started cold, standby kept.
        assert await standby.take(FrontLaunch(("/bin/true", *launch.argv[1:]), launch.environment,
                                              launch.working_directory), tmp_path / "x.log") is None
        # Nor one whose shared environment differs (LiteLLM may have read it while importing).
        other = {**launch.environment, "LITELLM_MODE": "DEV"}
        assert await standby.take(FrontLaunch(launch.argv, other, launch.working_directory), tmp_path / "y.log") is None
        assert standby.spare_pid == spare
        started = time.monotonic()
        process = await standby.take(launch, tmp_path / "front.log")
        assert process is not None and process.pid == spare
        url = f"http://127.0.0.1:{launch.argv[launch.argv.index('--port') + 1]}"
        async with httpx.AsyncClient(base_url=url, timeout=2.0, trust_env=False) as client:
            while True:
                assert process.returncode is None, (tmp_path / "front.log").read_text()[-2000:]
                try:
                    if (await client.get(LIVENESS_PATH)).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() - started < SERVE_WITHIN_S, "not live within the bound"
                await asyncio.sleep(0.05)
            # It is the launch's proxy: its master key (from the order, never argv) and Berth's custom auth.
            assert (await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})).status_code == 200
            assert (await client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})).status_code == 401
        assert os.getsid(process.pid) == process.pid  # its own session: the agent stops its whole group
        assert key.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()  # noqa: ASYNC240
        assert "Uvicorn running" in (tmp_path / "front.log").read_text(errors="replace")  # noqa: ASYNC240
        # The agent warms the next one at once.
        await wait_for(lambda: standby.spare_pid not in (None, spare), 10, "a new standby")
        process.terminate()
        assert await asyncio.wait_for(process.wait(), 30) is not None
    finally:
        await standby.close()
    assert standby.spare_pid is None


def test_a_standby_dies_with_its_agent(tmp_path: Path, executable: str) -> None:
    # A stand-in agent: spawns its standby, prints its pid, and is gone (as a SIGKILLed agent would be).
    agent = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from activities.litellm_standby import LiteLLMStandby\n"
        "async def main():\n"
        f"    standby = LiteLLMStandby(Path({str(tmp_path / 'standby')!r}), enabled=True)\n"
        "    standby.warm()\n"
        "    while standby.spare_pid is None:\n"
        "        await asyncio.sleep(0.05)\n"
        "    print(standby.spare_pid, flush=True)\n"
        "    import os; os._exit(0)\n"
        "asyncio.run(main())\n"
    )
    done = subprocess.run([sys.executable, "-c", agent], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}, check=True)
    pid = int(done.stdout.split()[-1])
    deadline = time.monotonic() + 30
    while Path(f"/proc/{pid}").exists() and _state(pid) != "Z":
        assert time.monotonic() < deadline, f"standby {pid} outlived its agent"
        time.sleep(0.05)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "gone"


async def test_off_spawns_none_and_a_bad_value_is_one_line(tmp_path: Path) -> None:
    assert litellm_standby_enabled({}) is True
    assert litellm_standby_enabled({"BERTH_LITELLM_STANDBY": "off"}) is False
    with pytest.raises(SystemExit, match="^BERTH_LITELLM_STANDBY must be on or off, not 'maybe'.$"):
        litellm_standby_enabled({"BERTH_LITELLM_STANDBY": "maybe"})
    standby = LiteLLMStandby(tmp_path, enabled=False)
    standby.warm()
    assert standby.spare_pid is None and standby._spawning is None
