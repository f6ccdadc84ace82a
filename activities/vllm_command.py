"""Render one rank's `vllm serve` command line and environment from the definition."""

from __future__ import annotations

from catalog.extra_args import in_model_dir
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


def rank_environment(spec: RankSpec, api_key: str | None = None) -> dict[str, str]:
    env = dict(spec.engine.extra_env)
    if spec.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in spec.gpus)
    if api_key:
        # vLLM guards /v1 with VLLM_API_KEY as with --api-key, which would put the key in argv
        # (/proc/PID/cmdline, readable by every local user); set last, so nothing overrides it.
        env["VLLM_API_KEY"] = api_key
    return env
