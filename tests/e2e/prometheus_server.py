"""A real Prometheus for the metrics test: Debian's prometheus (`make prometheus` installs it), started on a
free loopback port in the test's tmp dir with a generated scrape config, queried through its HTTP API, and
stopped after."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from berth.processes import free_port

MISSING = ("prometheus is not installed: `make prometheus` installs Debian's prometheus (or deselect these "
           "tests with -m 'not prometheus').")


@dataclass
class PrometheusServer:
    root: Path
    targets: dict[str, str]  # job name → host:port, each scraped at /metrics
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60.0) -> PrometheusServer:
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError(MISSING)
        self.root.mkdir(parents=True, exist_ok=True)
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                                     for job, target in self.targets.items()]}
        (self.root / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (self.root / "prometheus.log").open("ab")
        self.process = subprocess.Popen(
            [binary, f"--config.file={self.root / 'prometheus.yml'}", f"--storage.tsdb.path={self.root / 'data'}",
             f"--web.listen-address=127.0.0.1:{self.port}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while not self._ready():  # the condition: Prometheus says it is ready
            if self.process.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "prometheus.log").read_text()[-2000:]
                self.stop()
                raise RuntimeError(f"prometheus was not ready on port {self.port}: {tail}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def query(self, expression: str) -> list[dict[str, Any]]:
        """An instant query's result vector (each item: `metric` labels and `value` [time, "number"])."""
        answer = httpx.get(f"{self.url}/api/v1/query", params={"query": expression}, timeout=5).json()
        assert answer["status"] == "success", answer
        return list(answer["data"]["result"])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
