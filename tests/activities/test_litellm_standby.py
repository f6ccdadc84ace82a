"""The node agent's LiteLLM standby (activities/litellm_standby.py, gateway/litellm_hooks/standby.py) with the real
LiteLLM: imported once, it forks each LiteLLM launch, which serves within seconds, and reports how each ended; a
launch it cannot fork exactly is started cold; in mode `lazy` it is spawned at the first launch; it never outlives
the agent that spawned it, and its forks outlive it; BERTH_LITELLM_STANDBY turns it off."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Final

import httpx
import pytest
from pydantic import SecretStr

from activities.front_jail import jailed_launch
from activities.front_launch import FrontLaunch
from activities.launches import litellm_front
from activities.litellm_service import CONFIG_FILE_NAME, LIVENESS_PATH, LiteLLMServiceSpec, prepare_launch
from activities.litellm_standby import STANDBY_LOG, LiteLLMStandby
from activities.rank_jail import RankUser
from berth.processes import OwnedProcess, pid_alive
from berth.settings import litellm_standby_mode
from gateway.litellm_hooks.standby import FORKED_LINE, READY_LINE
from tests.gateway.litellm_hooks.test_litellm_proxy import free_port, litellm_executable

pytestmark = pytest.mark.litellm
ROOT: Final = os.geteuid() == 0  # only root jails (a node agent that is not root starts LiteLLM as itself)
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
    """A LiteLLM front's launch as the agent builds it (not jailed: FrontActivities jails it where it can)."""
    spec = LiteLLMServiceSpec(model_name="openai/standby", master_key=SecretStr(key), port=free_port(),
                              replicas_url=f"http://127.0.0.1:{free_port()}/replicas")
    return litellm_front(prepare_launch(spec, workdir, executable))


@pytest.fixture
def executable(monkeypatch: pytest.MonkeyPatch) -> str:
    found = litellm_executable()
    monkeypatch.setenv("BERTH_LITELLM_BIN", found)  # the standby stands in for the same one
    return found


async def serves(process: OwnedProcess, launch: FrontLaunch, log: Path, key: str) -> float:
    """Seconds until the launch's proxy is live; then its master key (from the order, never argv) and Berth's
    custom auth are checked."""
    started = time.monotonic()
    url = f"http://127.0.0.1:{launch.argv[launch.argv.index('--port') + 1]}"
    async with httpx.AsyncClient(base_url=url, timeout=2.0, trust_env=False) as client:
        while True:
            assert process.returncode is None, log.read_text()[-2000:]  # noqa: ASYNC240
            try:
                if (await client.get(LIVENESS_PATH)).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() - started < SERVE_WITHIN_S, "not live within the bound"
            await asyncio.sleep(0.05)
        assert (await client.get("/v1/models", headers={"Authorization": f"Bearer {key}"})).status_code == 200
        assert (await client.get("/v1/models", headers={"Authorization": "Bearer sk-wrong"})).status_code == 401
    return time.monotonic() - started


def memory_holds(pid: int, secret: bytes) -> bool:
    """Whether any readable mapping of `pid` holds `secret` (its heap, stacks and anonymous memory)."""
    with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", buffering=0) as memory:
        for line in maps:
            fields = line.split()
            if not fields[1].startswith("r") or len(fields) > 5 and fields[5].startswith("/"):
                continue  # unreadable, or a file's mapping (code, data the file already had)
            start, end = (int(value, 16) for value in fields[0].split("-"))
            try:
                memory.seek(start)
                if secret in memory.read(end - start):
                    return True
            except OSError:
                continue  # [vvar] and the like
    return False


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


async def test_a_standby_forks_each_launch_and_reports_how_each_ended(tmp_path: Path, executable: str) -> None:
    standby = LiteLLMStandby(tmp_path / "standby", "on")
    standby.warm()
    try:
        await wait_for(lambda: imported(tmp_path / "standby"), IMPORT_WITHIN_S, "the standby's imports")
        spare = standby.spare_pid
        assert spare is not None
        # LiteLLM's imports frozen out of the collector before any fork: each fork shares their pages.
        frozen = re.search(r"; (\d+) objects frozen", (tmp_path / "standby" / STANDBY_LOG).read_text())  # noqa: ASYNC240
        assert frozen is not None and int(frozen.group(1)) > 100_000
        key = f"sk-berth-{secrets.token_urlsafe(16)}"
        launch = launch_for(tmp_path / "front", key, executable)
        # A launch under another executable is not this standby's to fork: started cold, standby kept.
        assert await standby.take(FrontLaunch(("/bin/true", *launch.argv[1:]), launch.environment,
                                              launch.working_directory), tmp_path / "x.log") is None
        # Nor one whose shared environment differs (LiteLLM may have read it while importing).
        other = {**launch.environment, "LITELLM_MODE": "DEV"}
        assert await standby.take(FrontLaunch(launch.argv, other, launch.working_directory), tmp_path / "y.log") is None
        first = await standby.take(launch, tmp_path / "front.log")
        assert first is not None and first.pid != spare and parent_of(first.pid) == spare
        print(f"forked LiteLLM live in {await serves(first, launch, tmp_path / 'front.log', key):.2f} s")
        assert os.getsid(first.pid) == first.pid  # its own session: the agent stops its whole group
        assert key.encode() not in Path(f"/proc/{first.pid}/cmdline").read_bytes()  # noqa: ASYNC240
        # The order passed through the standby, which never parsed it and scrubbed its bytes after the fork: the
        # next fork's copy of its memory holds no earlier launch's master key.
        assert memory_holds(first.pid, key.encode()) and not memory_holds(spare, key.encode())
        assert "Uvicorn running" in (tmp_path / "front.log").read_text(errors="replace")  # noqa: ASYNC240
        # The same standby forks the next launch (a restart's): no import again, one ready line in its log.
        second_key = f"sk-berth-{secrets.token_urlsafe(16)}"
        second_launch = launch_for(tmp_path / "second", second_key, executable)
        second = await standby.take(second_launch, tmp_path / "second.log")
        assert second is not None and standby.spare_pid == spare and parent_of(second.pid) == spare
        await serves(second, second_launch, tmp_path / "second.log", second_key)
        assert (tmp_path / "standby" / STANDBY_LOG).read_text().count(READY_LINE) == 1  # noqa: ASYNC240
        if ROOT:
            await _a_jailed_launch_enters_its_jail_in_the_fork(standby, spare, tmp_path, executable)
        # Each one's end, as its parent saw it (uvicorn stops on SIGTERM, then raises it again).
        os.kill(first.pid, signal.SIGKILL)
        assert await asyncio.wait_for(first.wait(), 30) == -signal.SIGKILL
        os.kill(second.pid, signal.SIGTERM)
        assert await asyncio.wait_for(second.wait(), 30) == -signal.SIGTERM
        assert first.returncode == -signal.SIGKILL and second.returncode == -signal.SIGTERM
    finally:
        await standby.close()
    assert standby.spare_pid is None


async def _a_jailed_launch_enters_its_jail_in_the_fork(standby: LiteLLMStandby, spare: int, tmp_path: Path,
                                                       executable: str) -> None:
    """A root agent's LiteLLM (activities/fronts.py) runs as its workflow's rank user, in a mount namespace where the
    state dir shows nothing but its config and home: forked from the same standby, which enters the jail in the
    fork."""
    state = tmp_path / "state"
    (state / "keys").mkdir(parents=True)
    (state / "keys" / "cluster.key").write_text("secret")
    state.chmod(0o700)
    key = f"sk-berth-{secrets.token_urlsafe(16)}"
    user = RankUser("berth-rank", 999, 999)
    launch = await asyncio.to_thread(jailed_launch, user, launch_for(state / "nodes" / "n1" / "services" / "wf.lt", key,
                                                                     executable), state)
    jailed = await standby.take(launch, tmp_path / "jailed.log")
    assert jailed is not None and parent_of(jailed.pid) == spare  # forked, not started cold
    await serves(jailed, launch, tmp_path / "jailed.log", key)
    status = Path(f"/proc/{jailed.pid}/status").read_text()  # noqa: ASYNC240
    assert f"Uid:\t{user.uid}\t{user.uid}\t{user.uid}\t{user.uid}" in status, status
    seen = Path(f"/proc/{jailed.pid}/root")  # its own view of the files
    assert not (seen / (state / "keys").relative_to("/")).exists() and (state / "keys").is_dir()
    assert (seen / launch.working_directory.relative_to("/") / CONFIG_FILE_NAME).is_file()  # its config, bound back
    # Its run dir stays the agent's (the agent writes the config and the pidfile there: a directory the user owned
    # could hold a link the next config write would follow); only its home there is the user's.
    run_dir, home = os.lstat(launch.working_directory), os.lstat(launch.working_directory / "home")
    assert (run_dir.st_uid, run_dir.st_mode & 0o022) == (os.getuid(), 0) and home.st_uid == user.uid
    os.kill(jailed.pid, signal.SIGKILL)
    assert await asyncio.wait_for(jailed.wait(), 30) == -signal.SIGKILL


async def test_lazy_spawns_at_the_first_launch_a_fork_nobody_awaits_stops_and_one_outlives_its_standby(tmp_path: Path,
                                                                               executable: str) -> None:
    standby = LiteLLMStandby(tmp_path / "standby", "lazy")
    standby.warm()  # the agent's start: nothing in mode lazy
    assert standby.spare_pid is None and standby._spawning is None
    key = f"sk-berth-{secrets.token_urlsafe(16)}"
    launch = launch_for(tmp_path / "front", key, executable)
    process = None
    try:
        # A launch given up while the standby imports (its activity cancelled): forked once the imports are done,
        # and stopped at once, for nobody would own it.
        given_up = asyncio.create_task(standby.take(launch_for(tmp_path / "gone", key, executable),
                                                    tmp_path / "gone.log"))
        await wait_for(lambda: standby.spare_pid is not None, 10, "the standby's spawn")
        await asyncio.sleep(0.1)  # the order written: the take awaits its answer
        given_up.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await given_up
        log = tmp_path / "standby" / STANDBY_LOG
        await wait_for(lambda: FORKED_LINE in log.read_text(), IMPORT_WITHIN_S, "the given-up fork")
        unwanted = int(log.read_text().split(f"{FORKED_LINE} pid ")[1].split()[0])  # noqa: ASYNC240
        await wait_for(lambda: not pid_alive(unwanted), 10, "the given-up fork's end")
        process = await asyncio.wait_for(standby.take(launch, tmp_path / "front.log"), IMPORT_WITHIN_S)
        assert process is not None and standby.spare_pid == parent_of(process.pid)
        await serves(process, launch, tmp_path / "front.log", key)
        await standby.close()  # the agent stops: its proxies serve on (a restarted agent adopts them)
        assert standby.spare_pid is None and process.returncode is None
        await serves(process, launch, tmp_path / "front.log", key)
        # Its status is unknown now (its parent is gone), and its end is still seen.
        os.kill(process.pid, signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 30) is None
    finally:
        await standby.close()
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)


def test_a_standby_dies_with_its_agent(tmp_path: Path, executable: str) -> None:
    # A stand-in agent: spawns its standby, prints its pid, and is gone (as a SIGKILLed agent would be).
    agent = (
        "import asyncio, sys\n"
        "from pathlib import Path\n"
        "from activities.litellm_standby import LiteLLMStandby\n"
        "async def main():\n"
        f"    standby = LiteLLMStandby(Path({str(tmp_path / 'standby')!r}), 'on')\n"
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
    assert litellm_standby_mode({}) == "on"
    assert litellm_standby_mode({"BERTH_LITELLM_STANDBY": " Lazy "}) == "lazy"
    assert litellm_standby_mode({"BERTH_LITELLM_STANDBY": "off"}) == "off"
    with pytest.raises(SystemExit, match="^BERTH_LITELLM_STANDBY must be on, lazy or off, not 'maybe'.$"):
        litellm_standby_mode({"BERTH_LITELLM_STANDBY": "maybe"})
    standby = LiteLLMStandby(tmp_path, "off")
    standby.warm()
    assert await standby.take(FrontLaunch(("/bin/true",), {}, tmp_path), tmp_path / "x.log") is None
    assert standby.spare_pid is None and standby._spawning is None
