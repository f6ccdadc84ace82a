"""A real Redis for the shared-counter tests: Debian's redis-server (`make redis` installs it), started on
a free loopback port in the test's tmp dir, nothing saved, and stopped after."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from berth.processes import free_port

MISSING = ("redis-server is not installed: `make redis` installs Debian's redis-server (or deselect these "
           "tests with -m 'not redis').")


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@dataclass
class RedisServer:
    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(MISSING)
        self.root.mkdir(parents=True, exist_ok=True)
        log = (self.root / "redis.log").open("ab")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.root)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not _ping(self.port):  # the condition: Redis answers PING
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "redis.log").read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}: {tail}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Kill it (SIGKILL: what an outage looks like) and wait for it to be gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None
