"""hf_mirror: run olah as an offline Hugging Face mirror serving git repositories from local directories."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

# Any repository path works as a readiness probe: olah answers an unknown one with 401 without touching
# the disk or the network (in offline mode), and answers nothing at all until uvicorn is up.
READINESS_PATH = "/api/models/berth/readiness-probe/revision/main"
# Fixed git identity and dates: a published repository's commit id depends on its files only.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Berth",
    "GIT_AUTHOR_EMAIL": "berth@localhost",
    "GIT_AUTHOR_DATE": "2025-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Berth",
    "GIT_COMMITTER_EMAIL": "berth@localhost",
    "GIT_COMMITTER_DATE": "2025-01-01T00:00:00+00:00",
}


class MirrorStartError(RuntimeError):
    """olah exited or did not answer HTTP within the start-up timeout; the message carries its log tail."""


@dataclass(frozen=True)
class MirrorConfig:
    """Where the mirrored repositories are, where olah may write, and where it listens."""

    mirrors_dir: Path  # holds <type>/<org>/<name> git repositories, branch main (e.g. models/org/name)
    state_dir: Path  # olah's config file, cache (repos-path), logs and stdout
    host: str = "127.0.0.1"
    port: int = 0  # 0: a free port is chosen at start
    startup_timeout_seconds: float = 30.0
    stop_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ValueError(f"port must be in 0..65535, got {self.port}")
        if self.startup_timeout_seconds <= 0 or self.stop_timeout_seconds <= 0:
            raise ValueError("timeouts must be positive")


def render_olah_config(config: MirrorConfig, port: int) -> str:
    """olah's TOML configuration: offline, serving config.mirrors_dir, links pointing back at itself."""
    netloc = f"{config.host}:{port}"

    # json.dumps yields valid TOML basic strings (same escapes) for any path.
    def quote(value: str) -> str:
        return json.dumps(value)

    return "\n".join(
        [
            "[basic]",
            f"host = {quote(config.host)}",
            f"port = {port}",
            f"repos-path = {quote(str(config.state_dir.resolve() / 'repos'))}",
            f"mirrors-path = [{quote(str(config.mirrors_dir.resolve()))}]",
            'mirror-scheme = "http"',
            # Download links in olah's answers (LFS, redirects) must lead back to this very process.
            f"mirror-netloc = {quote(netloc)}",
            f"mirror-lfs-netloc = {quote(netloc)}",
            "",
            "[accessibility]",
            # Never contact huggingface.co: not for probes, not for misses.
            "offline = true",
            "",
        ]
    )


def olah_cli_path() -> Path:
    """olah's entry point from the virtualenv of the running interpreter (not whatever PATH finds)."""
    path = Path(sys.executable).with_name("olah-cli")
    if not path.exists():
        raise MirrorStartError(f"olah-cli not found next to {sys.executable}: install olah in this venv")
    return path


def free_port(host: str) -> int:
    """A port the kernel considers free right now (olah needs a concrete one for its own links)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class MirrorProcess:
    """One olah process in its own process group; start/stop (blocking) or astart/astop (async)."""

    def __init__(self, config: MirrorConfig) -> None:
        self.config = config
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None

    @property
    def url(self) -> str:
        if self._port is None:
            raise RuntimeError("mirror not started")
        return f"http://{self.config.host}:{self._port}"

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    @property
    def log_path(self) -> Path:
        return self.config.state_dir / "olah.out"

    def _spawn(self) -> None:
        if self._process is not None and self._process.poll() is None:
            raise RuntimeError("mirror already running")
        state_dir = self.config.state_dir
        state_dir.mkdir(parents=True, exist_ok=True)
        self._port = self.config.port or free_port(self.config.host)
        config_file = state_dir / "olah.toml"
        config_file.write_text(render_olah_config(self.config, self._port))
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                # --log-path: olah writes logs/olah.log relative to its working directory otherwise.
                [str(olah_cli_path()), "-c", str(config_file), "--log-path", str(state_dir / "logs")],
                cwd=state_dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: stop() reaches any child it forks
            )

    def _check_alive(self) -> None:
        assert self._process is not None
        if self._process.poll() is not None:
            raise MirrorStartError(
                f"olah exited with status {self._process.returncode} during start-up:\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def _timed_out(self) -> MirrorStartError:
        self._signal_group(signal.SIGKILL)
        return MirrorStartError(
            f"olah did not answer on {self.url} within {self.config.startup_timeout_seconds} s:\n"
            f"{self._log_tail()}"
        )

    def start(self) -> str:
        """Start olah and block until it answers HTTP; returns its URL (the HF_ENDPOINT to use)."""
        self._spawn()
        deadline = time.monotonic() + self.config.startup_timeout_seconds
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    client.get(self.url + READINESS_PATH)
                    return self.url
                except httpx.TransportError:
                    time.sleep(0.1)
        raise self._timed_out()

    async def astart(self) -> str:
        """Start olah and wait (without blocking the loop) until it answers HTTP; returns its URL."""
        self._spawn()
        deadline = time.monotonic() + self.config.startup_timeout_seconds
        async with httpx.AsyncClient(timeout=2.0) as client:
            while time.monotonic() < deadline:
                self._check_alive()
                try:
                    await client.get(self.url + READINESS_PATH)
                    return self.url
                except httpx.TransportError:
                    await asyncio.sleep(0.1)
        raise self._timed_out()

    def _signal_group(self, signum: signal.Signals) -> None:
        if self._process is None:
            return
        try:
            os.killpg(self._process.pid, signum)
        except ProcessLookupError:
            pass

    def stop(self) -> int | None:
        """SIGTERM the process group, SIGKILL it after stop_timeout_seconds; returns olah's exit status."""
        if self._process is None:
            return None
        self._signal_group(signal.SIGTERM)
        try:
            return self._process.wait(timeout=self.config.stop_timeout_seconds)
        except subprocess.TimeoutExpired:
            self._signal_group(signal.SIGKILL)
            return self._process.wait()

    async def astop(self) -> int | None:
        """stop() in a worker thread, so that the event loop keeps running while olah winds down."""
        return await asyncio.to_thread(self.stop)


@asynccontextmanager
async def run_mirror(config: MirrorConfig) -> AsyncIterator[str]:
    """`async with run_mirror(config) as endpoint:` olah runs inside the block, stopped on exit."""
    mirror = MirrorProcess(config)
    try:
        yield await mirror.astart()
    finally:
        await mirror.astop()


def publish_repo(
    mirrors_dir: Path, repo_id: str, files: Mapping[str, bytes | Path], repo_type: str = "models"
) -> str:
    """Write `files` as the single commit of branch main of `<mirrors_dir>/<repo_type>/<repo_id>`.

    Replaces any repository already there. Returns the commit id, which depends on the files only.
    """
    repo = mirrors_dir / repo_type / repo_id
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    for name, content in files.items():
        target = repo / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            shutil.copyfile(content, target)
        else:
            target.write_bytes(content)
    # olah serves branch "main" only: with "master" every request is answered 401 "Repository not found".
    _git(repo, "init", "--quiet", "--initial-branch=main")
    # Weights are incompressible, and olah inflates a whole blob per request: store them as they are.
    _git(repo, "config", "core.looseCompression", "0")
    _git(repo, "add", "--all")
    _git(repo, "commit", "--quiet", "--no-gpg-sign", "-m", f"Publish {repo_id}")
    return _git(repo, "rev-parse", "HEAD")


def _git(repo: Path, *args: str) -> str:
    # Isolated from the user's and the system's git configuration (hooks, signing, default branch).
    env = {**os.environ, **GIT_IDENTITY, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    completed = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, check=True, capture_output=True, text=True
    )
    return completed.stdout.strip()


def serve_forever(mirrors_dir: Path, port: int, state_dir: Path) -> None:
    """`berth hf-mirror`: run olah over `mirrors_dir` until SIGTERM/SIGINT (the stack supervises us)."""
    import threading

    if not (mirrors_dir / "models").is_dir():
        raise SystemExit(f"{mirrors_dir} holds no models/ folder of git repositories; build one with "
                         "`make smollm2` or see docs/vllm-cpu.md.")
    mirror = MirrorProcess(MirrorConfig(mirrors_dir=mirrors_dir, state_dir=state_dir / "hf-mirror", port=port,
                                        startup_timeout_seconds=60))
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    url = mirror.start()
    print(f"hf-mirror serving {mirrors_dir} at {url}", flush=True)
    try:
        stop.wait()
    finally:
        mirror.stop()
