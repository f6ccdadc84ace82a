"""Command line: turn a `vllm serve` argument list plus BERTH_SIM_* variables into an EngineConfig."""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DEFAULT_PORT = 8000
# vLLM reads the context length from the model's config; the simulator has no model, so it picks one.
DEFAULT_MAX_MODEL_LEN = 8192
DEFAULT_MAX_NUM_SEQS = 8
DEFAULT_TOKENS_PER_SECOND = 200.0
DEFAULT_PREFIX_CACHE_BLOCKS = 4096  # 64k tokens of prompts

_HUMAN_INT = re.compile(r"^(\d+(?:\.\d+)?)([kKmMgG]?)$")


class CommandLineError(ValueError):
    """The command line or a BERTH_SIM_* variable is invalid; the message says which and why."""


@dataclass(frozen=True)
class EngineConfig:
    """Everything one simulated `vllm serve` process needs, from its flags and environment."""

    model: str
    served_model_names: tuple[str, ...]
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    api_key: str | None = None
    max_model_len: int = DEFAULT_MAX_MODEL_LEN
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_size_local: int | None = None
    data_parallel_address: str | None = None
    data_parallel_rpc_port: int | None = None
    data_parallel_start_rank: int | None = None
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None
    headless: bool = False
    enable_expert_parallel: bool = False
    gpu_memory_utilization: float = 0.9
    download_dir: str | None = None
    enforce_eager: bool = False
    enable_auto_tool_choice: bool = False
    tool_call_parser: str | None = None
    dtype: str = "auto"
    trust_remote_code: bool = False
    # Simulator-only behaviour, from BERTH_SIM_* variables so the command line stays vLLM's.
    startup_delay: float = 0.0
    tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND
    time_to_first_token: float = 0.0
    # Prefill: prompt tokens/s one engine processes, one prompt at a time (0: prefill costs nothing, as before);
    # the prefix cache's size in 16-token blocks, whose hits skip their prefill (simulator/prefix_cache.py).
    prefill_tokens_per_second: float = 0.0
    prefix_cache_blocks: int = DEFAULT_PREFIX_CACHE_BLOCKS
    reply: str | None = None
    exit_after: float | None = None
    exit_code: int = 1
    # --middleware, as vLLM takes it: ASGI middleware by import path, outermost last (Berth's copy guard).
    middleware: tuple[str, ...] = ()
    fail_share: float = 0.0  # --fail-share: this share of completion requests answers 500 (a canary's fault)
    # Flags vLLM might know but the simulator does not, kept so the caller can warn about them.
    ignored_args: tuple[str, ...] = ()

    @property
    def served_model_name(self) -> str:
        """The name the API reports first, as vLLM does with several served names."""
        return self.served_model_names[0]


class _RaisingParser(argparse.ArgumentParser):
    """An ArgumentParser that raises instead of printing and exiting, so parsing stays a pure function."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CommandLineError(message)


def human_readable_int(value: str) -> int:
    """Parse vLLM's context-length syntax: `32768`, `32k` (x1000) or `32K` (x1024), likewise m/M, g/G."""
    match = _HUMAN_INT.match(value.strip())
    if match is None:
        raise argparse.ArgumentTypeError(f"invalid length {value!r}: expected e.g. 4096, 32k or 32K")
    number, suffix = match.groups()
    if not suffix:
        if "." in number:
            raise argparse.ArgumentTypeError(f"invalid length {value!r}: a plain number must be whole")
        return int(number)
    power = "kmg".index(suffix.lower()) + 1
    base = 1000 if suffix.islower() else 1024
    return int(float(number) * base**power)


def _build_parser() -> _RaisingParser:
    parser = _RaisingParser(prog="python -m simulator serve", add_help=False, allow_abbrev=False)
    parser.add_argument("model_tag", nargs="?", default=None, metavar="MODEL")
    parser.add_argument("--model", default=None)
    parser.add_argument("--served-model-name", nargs="+", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--max-model-len", type=human_readable_int, default=DEFAULT_MAX_MODEL_LEN)
    parser.add_argument("--max-num-seqs", type=int, default=None)
    parser.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    parser.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    parser.add_argument("--data-parallel-size-local", "-dpl", type=int, default=None)
    parser.add_argument("--data-parallel-address", "-dpa", default=None)
    parser.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=None)
    parser.add_argument("--data-parallel-start-rank", "-dpr", type=int, default=None)
    parser.add_argument("--nnodes", type=int, default=1)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--master-addr", default=None)
    parser.add_argument("--master-port", type=int, default=None)
    parser.add_argument("--headless", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--enable-expert-parallel", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--download-dir", default=None)
    parser.add_argument("--enforce-eager", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--enable-auto-tool-choice", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--tool-call-parser", default=None)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--trust-remote-code", action=argparse.BooleanOptionalAction, default=False)
    parser.add_argument("--middleware", action="append", default=[])
    # Simulator only (vLLM has no such flag): a catalog entry passes it through its ExtraArgs.
    parser.add_argument("--fail-share", type=float, default=0.0, metavar="SHARE",
                        help="simulator only: this share (0 to 1) of completion requests answers HTTP 500 with "
                             "an OpenAI-style error body, evenly spread and deterministic (0.5: every second "
                             "request, 0.25: every fourth)")
    return parser


def help_text() -> str:
    """The flags the simulator understands, for `serve --help`."""
    return _build_parser().format_help()


def _normalise_flag(argument: str) -> str:
    """vLLM accepts `--max_model_len` for `--max-model-len`; only the name part is rewritten."""
    if not argument.startswith("--"):
        return argument
    name, equals, value = argument.partition("=")
    return name.replace("_", "-") + equals + value


def _group_unknown(extras: Sequence[str]) -> tuple[str, ...]:
    """Join each unknown flag with the values that follow it: `--seed 0` is one ignored argument."""
    groups: list[str] = []
    for token in extras:
        if token.startswith("-") or not groups:
            groups.append(token)
        else:
            groups[-1] = f"{groups[-1]} {token}"
    return tuple(groups)


def _env_optional_float(environ: Mapping[str, str], name: str) -> float | None:
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise CommandLineError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise CommandLineError(f"{name}={raw!r} must not be negative")
    return value


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    value = _env_optional_float(environ, name)
    return default if value is None else value


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise CommandLineError(f"{name}={raw!r} is not a whole number") from None


def parse_command_line(argv: Sequence[str], environ: Mapping[str, str]) -> EngineConfig:
    """Parse the arguments after `serve` and the BERTH_SIM_* variables; raise CommandLineError if invalid.

    Unknown flags, with or without a value, are accepted and returned in `ignored_args`.
    Put the model first (`serve MODEL --flags`), as vLLM's documentation does: an unknown flag
    that takes a value cannot be told apart from a boolean one followed by the model.
    """
    namespace, extras = _build_parser().parse_known_args([_normalise_flag(arg) for arg in argv])
    model, max_num_seqs = _checked(namespace, environ)
    return EngineConfig(
        model=model,
        served_model_names=tuple(namespace.served_model_name or [model]),
        host=namespace.host,
        port=namespace.port,
        api_key=namespace.api_key or environ.get("VLLM_API_KEY") or None,
        max_model_len=namespace.max_model_len,
        max_num_seqs=max_num_seqs,
        tensor_parallel_size=namespace.tensor_parallel_size,
        pipeline_parallel_size=namespace.pipeline_parallel_size,
        data_parallel_size=namespace.data_parallel_size,
        data_parallel_size_local=namespace.data_parallel_size_local,
        data_parallel_address=namespace.data_parallel_address,
        data_parallel_rpc_port=namespace.data_parallel_rpc_port,
        data_parallel_start_rank=namespace.data_parallel_start_rank,
        nnodes=namespace.nnodes,
        node_rank=namespace.node_rank,
        master_addr=namespace.master_addr,
        master_port=namespace.master_port,
        headless=namespace.headless,
        enable_expert_parallel=namespace.enable_expert_parallel,
        gpu_memory_utilization=namespace.gpu_memory_utilization,
        download_dir=namespace.download_dir,
        enforce_eager=namespace.enforce_eager,
        enable_auto_tool_choice=namespace.enable_auto_tool_choice,
        tool_call_parser=namespace.tool_call_parser,
        dtype=namespace.dtype,
        trust_remote_code=namespace.trust_remote_code,
        startup_delay=_env_float(environ, "BERTH_SIM_STARTUP_DELAY", 0.0),
        tokens_per_second=_env_float(environ, "BERTH_SIM_TOKENS_PER_SECOND", DEFAULT_TOKENS_PER_SECOND),
        time_to_first_token=_env_float(environ, "BERTH_SIM_TTFT", 0.0),
        prefill_tokens_per_second=_env_float(environ, "BERTH_SIM_PREFILL_TOKENS_PER_SECOND", 0.0),
        prefix_cache_blocks=_env_int(environ, "BERTH_SIM_PREFIX_CACHE_BLOCKS", DEFAULT_PREFIX_CACHE_BLOCKS),
        reply=environ.get("BERTH_SIM_REPLY") or None,
        exit_after=_env_optional_float(environ, "BERTH_SIM_EXIT_AFTER"),
        exit_code=_env_int(environ, "BERTH_SIM_EXIT_CODE", 1),
        middleware=tuple(namespace.middleware),
        fail_share=namespace.fail_share,
        ignored_args=_group_unknown(extras),
    )


def _checked(namespace: argparse.Namespace, environ: Mapping[str, str]) -> tuple[str, int]:
    """The model and max-num-seqs, once the flags vLLM would refuse have been refused."""
    model: str | None = namespace.model_tag or namespace.model
    if not model:
        raise CommandLineError("the model (positional MODEL or --model) is required")
    if namespace.enable_auto_tool_choice and not namespace.tool_call_parser:
        # vLLM refuses to start this way too.
        raise CommandLineError("--enable-auto-tool-choice requires --tool-call-parser")
    max_num_seqs = namespace.max_num_seqs
    if max_num_seqs is None:
        max_num_seqs = _env_int(environ, "BERTH_SIM_MAX_NUM_SEQS", DEFAULT_MAX_NUM_SEQS)
    if max_num_seqs < 1:
        raise CommandLineError(f"max-num-seqs must be at least 1, got {max_num_seqs}")
    if namespace.max_model_len < 1:
        raise CommandLineError(f"--max-model-len must be at least 1, got {namespace.max_model_len}")
    if not 0 <= namespace.fail_share <= 1:
        raise CommandLineError(f"--fail-share {namespace.fail_share:g} is not a share from 0 to 1")
    if not 0 <= namespace.port <= 65535:
        raise CommandLineError(f"--port {namespace.port} is not a TCP port")
    return model, max_num_seqs
