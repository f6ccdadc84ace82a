"""How long `berth` takes to answer (issue 33): `--help` and `workflow list` against `python -c pass`, one run.

Each command runs as a fresh interpreter, best of N, wall time (perf_counter around the process) and CPU time
(user+system of the reaped child): same-run ratios, since the machine's load moves the absolute figures.
`workflow list` (its fast path) and `endpoint list` (a command on the Typer path, through the API client) ask a
canned API on loopback (one valid `GET /v1/workflows` answer, an empty `GET /v1/endpoints`), or with `--stack` a
real embedded stack (simulated GPUs, one workflow started). Target: `workflow list` ≤ 2× `python -c pass` plus the
HTTP call, ≤ 150 ms wall on a quiet machine. Prints JSON; tests/cli/test_import_time.py holds the budgets.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from bench.common import emit

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
# One summary as `GET /v1/workflows` lists it (berth.contracts.WorkflowSummary).
CANNED_WORKFLOWS = [{"id": "gpt-oss-20b-1", "entry": "GPT-OSS 20B", "owner": "admin", "created_at": 1764950400.0,
                     "status": "running", "phase": "ready", "endpoint_id": "ep-1"}]


@dataclass(frozen=True)
class Timing:
    """One command's best run out of several, in seconds."""

    wall_s: float
    cpu_s: float


def measure(argv: Sequence[str], env: dict[str, str], repeats: int, cwd: Path = REPO) -> Timing:
    """`argv` run `repeats` times in `cwd`: the least wall time and the least CPU time (user+system, from the
    children's rusage, so it counts the interpreter and nothing of the measuring process)."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        result = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=60)
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return Timing(min(walls), min(cpus))


# What the canned API answers: a workflow listing (the fast path's), and an empty endpoint listing (a command on the
# Typer path: the API client, a contract, Rich).
CANNED = {"/v1/workflows": CANNED_WORKFLOWS, "/v1/endpoints": []}


class _CannedApi(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 — http.server's name
        if self.path not in CANNED:
            self.send_error(404)
            return
        data = json.dumps(CANNED[self.path]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass  # a line per request would be noise


@contextmanager
def canned_api() -> Iterator[str]:
    """An API on loopback that answers CANNED's `GET`s: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CannedApi)
    thread = threading.Thread(target=server.serve_forever, name="canned-api", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def client_env(api_url: str, token: str, config: Path, checkout: Path = REPO) -> dict[str, str]:
    """The CLI's environment: `checkout`'s code, the API at `api_url`, no client config file or CA of the user's.
    Bytecode is cached (beside `config`, not in the checkout) as an installed CLI has it: without it every run
    compiles Berth's modules again, and that is not what a user waits for."""
    env = {name: value for name, value in os.environ.items()
           if not name.startswith("BERTH_") and name != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "PYTHONPATH": str(checkout), "PYTHONPYCACHEPREFIX": str(config.parent / "pycache"),
            "BERTH_CONFIG": str(config), "BERTH_API_URL": api_url, "BERTH_TOKEN": token, "COLUMNS": "120"}


COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "import cli.main": ["-c", "import cli.main"],
    "berth --help": ["-m", "cli", "--help"],
    "berth workflow list --help": ["-m", "cli", "workflow", "list", "--help"],
    "berth workflow list": ["-m", "cli", "workflow", "list"],
    "berth endpoint list -o json": ["-m", "cli", "endpoint", "list", "-o", "json"],
}


def measure_all(checkouts: dict[str, Path], api_url: str, token: str, config: Path,
                repeats: int) -> dict[str, dict[str, Timing]]:
    """Every command in COMMANDS, of every checkout (label → its root), taking turns round by round so that
    load drift falls on all alike: label → command → best timing. A first round, not counted, caches the
    bytecode."""
    rounds: dict[tuple[str, str], list[Timing]] = {(label, name): [] for label in checkouts for name in COMMANDS}
    for root in checkouts.values():
        for argv in COMMANDS.values():
            measure([PYTHON, *argv], client_env(api_url, token, config, root), 1, cwd=root)
    for _ in range(repeats):
        for label, root in checkouts.items():
            env = client_env(api_url, token, config, root)
            for name, argv in COMMANDS.items():
                rounds[label, name].append(measure([PYTHON, *argv], env, 1, cwd=root))
    return {label: {name: Timing(min(t.wall_s for t in rounds[label, name]), min(t.cpu_s for t in rounds[label, name]))
                    for name in COMMANDS} for label in checkouts}


def report(timings: dict[str, Timing]) -> dict[str, object]:
    base = timings["python -c pass"]
    return {name: {"wall_ms": round(t.wall_s * 1000, 1), "cpu_ms": round(t.cpu_s * 1000, 1),
                   "wall_x_pass": round(t.wall_s / base.wall_s, 2), "cpu_x_pass": round(t.cpu_s / base.cpu_s, 2)}
            for name, t in timings.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--stack", action="store_true", help="list a real embedded stack's workflows")
    parser.add_argument("--baseline", type=Path, help="another checkout (e.g. main's) measured in the same rounds")
    options = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-cli-"))
    checkouts = {"this checkout": REPO, **({"baseline": options.baseline.resolve()} if options.baseline else {})}
    config = workdir / "client.json"
    if options.stack:
        from stack.driver import RunningStack, free_port_base

        stack = RunningStack(state_dir=workdir / "state", port_base=free_port_base(), simulate_gpus="1x80GB").start()
        try:
            stack.start_entry("GPT-OSS 20B", watch=False)
            timings = measure_all(checkouts, stack.info["api_url"], stack.token, config, options.repeats)
        finally:
            stack.stop()
    else:
        with canned_api() as url:
            timings = measure_all(checkouts, url, "bench", config, options.repeats)
    emit("cli_start", {"api": "stack" if options.stack else "canned", "repeats": options.repeats,
                       **{label: report(figures) for label, figures in timings.items()}})


if __name__ == "__main__":
    main()
