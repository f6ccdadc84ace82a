"""Endpoint proxy vs direct to the simulator vs stock LiteLLM (one worker), same run, loopback.

Issue 2's figures (top level): the proxy with an endpoint token and the default limits. Issue 15's
(`keyed_limited`, what `targets` applies to): the proxy with a Berth API key and every limit of LimitPolicy set
(bench/proxy_limits.py), counters in memory: added p50 at concurrency 1 ≤ 0.5 ms, req/s at concurrency 32
(non-streamed, wrk when installed) ≥ 10× stock LiteLLM's, proxy CPU per streamed chunk ≤ 0.02 ms; beside it
the added p50 with counters in Redis. One stack at a time (plain, limited in memory, limited in Redis), each
alone on the machine; on each, direct, a token and the key interleaved round by round; and
`audit_writer`: the audit records' cost per request on the proxy's path (bench/audit_writer.py). Prints JSON.
`--tls` (issue 13): a short run instead, a plain and a `berth up --tls` stack side by side: what https adds
to the proxy's p50 (kept-alive connection, as an SDK uses; and a new connection's handshake).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.common import CHAT_BODY, cpu_seconds, emit, summary, wrk_post_script
from bench.limits_admit import start_redis
from bench.process_cpu import cpu_per_request, endpoint_of
from bench.proxy_limits import LimitedStack, Target, audit_cost, start_limited, write_limits_file
from bench.sim_targets import STACK_ENV, endpoint_target
from berth.processes import free_port, stop_group_sync, wait_http_sync
from stack.driver import RunningStack, free_port_base, litellm_bin

BODY = CHAT_BODY


async def latencies(url: str, headers: dict[str, str], count: int) -> list[float]:
    out = []
    async with httpx.AsyncClient(timeout=30) as client:
        for _ in range(20):
            await client.post(url, json=BODY, headers=headers)
        for _ in range(count):
            started = time.perf_counter()
            response = await client.post(url, json=BODY, headers=headers)
            out.append((time.perf_counter() - started) * 1000)
            response.raise_for_status()
    return out


async def throughput(url: str, headers: dict[str, str], concurrency: int, seconds: float) -> float:
    done = 0
    deadline = time.monotonic() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:
        async def loop() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                response = await client.post(url, json=BODY, headers=headers)
                response.raise_for_status()
                done += 1
        started = time.monotonic()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return done / (time.monotonic() - started)


def throughput_wrk(url: str, headers: dict[str, str], concurrency: int, seconds: float) -> float | None:
    """req/s from wrk (a C load generator: it leaves the cores to what is measured), if installed."""
    wrk = shutil.which("wrk")
    if wrk is None:
        return None
    script = wrk_post_script(Path(tempfile.mkdtemp()), headers)
    result = subprocess.run([wrk, "-t1", f"-c{concurrency}", f"-d{seconds:.0f}s", "-s", str(script), url],
                            capture_output=True, text=True, check=True)
    match = re.search(r"Requests/sec:\s+([\d.]+)", result.stdout)
    if "Non-2xx" in result.stdout or match is None:
        raise RuntimeError(f"wrk saw errors:\n{result.stdout}")
    return float(match.group(1))


async def rps(url: str, headers: dict[str, str], concurrency: int = 32, seconds: float = 8) -> float:
    measured = throughput_wrk(url, headers, concurrency, seconds)
    return measured if measured is not None else await throughput(url, headers, concurrency, seconds)


async def stream_chunks(url: str, headers: dict[str, str], requests: int) -> int:
    chunks = 0
    body = {**BODY, "max_tokens": 400, "stream": True}
    async with httpx.AsyncClient(timeout=60) as client:
        for _ in range(requests):
            async with client.stream("POST", url, json=body, headers=headers) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        chunks += 1
    return chunks


def start_litellm(replica: str, workdir: Path, replica_key: str) -> tuple[subprocess.Popen[bytes], str]:
    """Stock LiteLLM as its documentation has a user put it in front of a vLLM server: one `hosted_vllm/`
    deployment and a master key, every other setting and the log level left at LiteLLM's defaults (the cost map
    read from the package, as this machine has no internet: a start-up matter, not a per-request one)."""
    port = free_port()
    config = {"model_list": [{"model_name": "openai/gpt-oss-20b",
                              "litellm_params": {"model": "hosted_vllm/openai/gpt-oss-20b", "api_base": replica + "/v1",
                                                 "api_key": replica_key}}],
              "general_settings": {"master_key": "sk-bench-master"}}
    path = workdir / "litellm.yaml"
    path.write_text(yaml.safe_dump(config))
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True")
    log = open(workdir / "litellm.log", "wb")  # noqa: SIM115
    process = subprocess.Popen([litellm_bin() or "litellm", "--config", str(path), "--port",
                                str(port), "--host", "127.0.0.1", "--num_workers", "1"], env=env, stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)
    wait_http_sync(f"http://127.0.0.1:{port}/health/liveliness", 120, process)
    return process, f"http://127.0.0.1:{port}"


async def interleaved(targets: dict[str, Target], rounds: int, fresh: bool = False) -> dict[str, list[float]]:
    """One request to each target per round, in turn, so that the load of a shared machine weighs on
    every target alike; `fresh`: each request on a new connection (TCP + TLS handshake in the figure)."""
    out: dict[str, list[float]] = {name: [] for name in targets}
    clients = {name: httpx.AsyncClient(timeout=30, verify=verify) for name, (_, _, verify) in targets.items()}
    try:
        for round_number in range(rounds + 10):  # the first 10 rounds warm up
            for name, (url, headers, verify) in targets.items():
                client = httpx.AsyncClient(timeout=30, verify=verify) if fresh else clients[name]
                started = time.perf_counter()
                (await client.post(url, json=BODY, headers=headers)).raise_for_status()
                if round_number >= 10:
                    out[name].append((time.perf_counter() - started) * 1000)
                if fresh:
                    await client.aclose()
    finally:
        for client in clients.values():
            await client.aclose()
    return out


def tls_overhead() -> None:
    """A plain and a `--tls` stack side by side, requests interleaved: direct, plain proxy, https proxy."""
    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-proxy-tls-"))
    stacks = []
    try:
        for name, tls in (("plain", False), ("tls", True)):
            stacks.append(RunningStack(state_dir=workdir / name, port_base=free_port_base(), nodes=1,
                                       simulate_gpus="1x80GB", extra_env={"BERTH_SIM_TOKENS_PER_SECOND": "0"},
                                       tls=tls).start())
        direct, plain = endpoint_target(stacks[0])
        _, https = endpoint_target(stacks[1])
        targets = {"direct": direct, "proxy_http": plain, "proxy_https": https}
        kept = {name: summary(values) for name, values in asyncio.run(interleaved(targets, 400)).items()}
        fresh = {name: summary(values) for name, values in asyncio.run(interleaved(targets, 60, True)).items()}
        emit("proxy_overhead_tls", {
            "kept_alive_ms": kept, "new_connection_ms": fresh,
            "proxy_http_added_p50_ms": kept["proxy_http"]["p50"] - kept["direct"]["p50"],
            "proxy_https_added_p50_ms": kept["proxy_https"]["p50"] - kept["direct"]["p50"],
            "tls_added_p50_ms": kept["proxy_https"]["p50"] - kept["proxy_http"]["p50"],
            "tls_new_connection_added_p50_ms": fresh["proxy_https"]["p50"] - fresh["proxy_http"]["p50"],
        })
    finally:
        for stack in stacks:
            stack.stop()


TARGETS = {"added_p50_ms": 0.5, "proxy_vs_litellm_rps": 10.0, "cpu_ms_per_chunk": 0.02}  # issue 15's


def _cpu_per_chunk(pid: int, target: Target) -> tuple[float, int]:
    """A process's CPU per streamed chunk over 20 streamed answers through `target`: (ms, chunks)."""
    before = cpu_seconds(pid)
    chunks = asyncio.run(stream_chunks(target[0], target[1], 20))
    return (cpu_seconds(pid) - before) * 1000 / max(chunks, 1), chunks


def _plain_figures(stack: RunningStack, direct: Target, proxied: Target,
                   kept: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Issue 2's figures: the proxy with an endpoint token and the default limits (the body limit alone)."""
    proxy_pid = next(c["pid"] for c in stack.info["children"] if c["name"] == "proxy")
    cpu_per_chunk_ms, chunks = _cpu_per_chunk(proxy_pid, proxied)
    return {"latency_ms_concurrency_1": {"direct": kept["direct"], "proxy": kept["proxy"]},
            "added_p50_ms": kept["proxy"]["p50"] - kept["direct"]["p50"],
            "rps_concurrency_32": {"proxy": asyncio.run(rps(proxied[0], proxied[1])),
                                   "direct": asyncio.run(rps(direct[0], direct[1]))},
            "proxy_cpu_ms_per_streamed_chunk": cpu_per_chunk_ms, "streamed_chunks": chunks,
            "rps_concurrency_32_httpx_load_generator": {
                "direct": asyncio.run(throughput(direct[0], direct[1], 32, 6)),
                "proxy": asyncio.run(throughput(proxied[0], proxied[1], 32, 6))},
            # Issue 33: every Berth process's CPU per proxied request (bench/process_cpu.py).
            "process_cpu": cpu_per_request(stack, proxied[0], proxied[1], endpoint_of(proxied[0]))}


def _keyed_figures(limited: LimitedStack, kept: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Issue 15's figures: through the proxy with a key and every limit set, counters in memory."""
    cpu_per_chunk_ms, chunks = _cpu_per_chunk(limited.proxy_pid, limited.keyed)
    url, headers, _ = limited.keyed
    return {"latency_ms_concurrency_1": kept,
            "added_p50_ms": kept["keyed"]["p50"] - kept["direct"]["p50"],
            "added_p50_ms_token_same_limits": kept["token"]["p50"] - kept["direct"]["p50"],
            "rps_concurrency_32": asyncio.run(rps(url, headers)),
            "rps_concurrency_32_key_without_request_quota": asyncio.run(rps(*limited.keyed_no_quota[:2])),
            "rps_concurrency_32_httpx_load_generator": asyncio.run(throughput(url, headers, 32, 6)),
            "cpu_ms_per_streamed_chunk": cpu_per_chunk_ms, "streamed_chunks": chunks,
            "process_cpu": cpu_per_request(limited.stack, url, headers, endpoint_of(url))}


def _litellm_figures(direct: Target, workdir: Path, result: dict[str, Any]) -> subprocess.Popen[bytes]:
    """Stock LiteLLM in front of the same copy: its req/s and CPU per chunk, and the plain proxy's ratio."""
    replica = direct[0].removesuffix("/v1/chat/completions")
    litellm, litellm_url = start_litellm(replica, workdir, direct[1]["Authorization"].removeprefix("Bearer "))
    target: Target = (litellm_url + "/v1/chat/completions", {"Authorization": "Bearer sk-bench-master"}, True)
    litellm_rps = asyncio.run(rps(target[0], target[1]))
    before = cpu_seconds(litellm.pid)
    litellm_chunks = asyncio.run(stream_chunks(target[0], target[1], 5))
    result["litellm_cpu_ms_per_streamed_chunk"] = (cpu_seconds(litellm.pid) - before) * 1000 / max(litellm_chunks, 1)
    result["rps_concurrency_32"]["litellm"] = litellm_rps
    result["proxy_vs_litellm_rps"] = result["rps_concurrency_32"]["proxy"] / litellm_rps
    httpx_rps = result["rps_concurrency_32_httpx_load_generator"]
    httpx_rps["litellm"] = asyncio.run(throughput(target[0], target[1], 32, 6))
    httpx_rps["proxy_vs_litellm"] = httpx_rps["proxy"] / httpx_rps["litellm"]
    return litellm


def _plain_phase(workdir: Path) -> dict[str, Any]:
    """Issue 2's figures on a stack of their own (and stock LiteLLM's, in front of its copy)."""
    stack = RunningStack(state_dir=workdir / "state", port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB",
                         extra_env=STACK_ENV).start()
    litellm = None
    try:
        # Proxy=false: this bench measures the endpoint proxy alone (bench/litellm_overhead.py: the full path).
        direct, proxied = endpoint_target(stack)
        rounds = asyncio.run(interleaved({"direct": direct, "proxy": proxied}, 400))
        result = _plain_figures(stack, direct, proxied, {name: summary(v) for name, v in rounds.items()})
        if litellm_bin():
            litellm = _litellm_figures(direct, workdir, result)
        return result
    finally:
        if litellm is not None:
            stop_group_sync(litellm.pid, 10)
        stack.stop()


def _keyed_phase(workdir: Path, limits_file: Path, redis_url: str | None) -> dict[str, Any]:
    """A stack with every limit set (counters in memory, or in Redis), alone on the machine: direct, a token
    and a key through its proxy, interleaved; the throughput and CPU figures only for memory counters."""
    name = "redis" if redis_url else "memory"
    limited = start_limited(workdir / f"limited-{name}", STACK_ENV, limits_file, redis_url)
    try:
        rounds = asyncio.run(interleaved({"direct": limited.direct, "token": limited.token,
                                          "keyed": limited.keyed}, 400))
        kept = {target: summary(values) for target, values in rounds.items()}
        if redis_url:
            return {"latency_ms_concurrency_1": kept, "added_p50_ms": kept["keyed"]["p50"] - kept["direct"]["p50"]}
        return _keyed_figures(limited, kept)
    finally:
        limited.stack.stop()


def main() -> None:
    if "--tls" in sys.argv[1:]:
        tls_overhead()
        return
    workdir = Path(tempfile.mkdtemp(prefix="berth-bench-proxy-"))
    # One stack at a time (three side by side on two cores took ~0.5 ms from every proxy's figure).
    result = _plain_phase(workdir)
    limits_file = write_limits_file(workdir / "limits")
    keyed = result["keyed_limited"] = _keyed_phase(workdir, limits_file, None)
    result["rps_concurrency_32"]["keyed"] = keyed["rps_concurrency_32"]
    if "litellm" in result["rps_concurrency_32"]:
        keyed["proxy_vs_litellm_rps"] = keyed["rps_concurrency_32"] / result["rps_concurrency_32"]["litellm"]
    redis = start_redis(str(workdir))
    if redis is None:
        keyed["redis_counters"] = "no redis-server on PATH: the Redis figures are missing"
    else:
        try:
            keyed["redis_counters"] = _keyed_phase(workdir, limits_file, redis[1])
        finally:
            redis[0].kill()
            redis[0].wait(timeout=10)
    result["audit_writer"] = audit_cost()
    result["load_generator"] = "wrk" if shutil.which("wrk") else "httpx"
    result["targets"] = {**TARGETS, "apply_to": "keyed_limited"}
    emit("proxy_overhead", result)


if __name__ == "__main__":
    main()
