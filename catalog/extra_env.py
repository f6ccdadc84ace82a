"""ExtraEnv is an allow-list (security issue 29, finding 12): a user may set only the engine tuning variables
named here. A family rule (berth/child_environment.py: `VLLM_*`, `HF_*`, …) let through variables that move
the engine rather than tune it: HF_ENDPOINT points downloads at another host, VLLM_HOST_IP and VLLM_PORT move
what the ranks announce and listen on, VLLM_USAGE_STATS_SERVER sends reports to any host, and every new vLLM
adds more.

That family rule still runs first and keeps its messages (credentials, files, loader and interpreter
variables, Berth's own); this list refuses what is left. Variables that are the node's to choose (CPU KV-cache
space, thread binding, where caches live) are not here: an operator sets them on the node agent, whose engine
variables every rank inherits. CUDA_VISIBLE_DEVICES stays Berth's: it assigns each rank its GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from berth.errors import UserInputError, shown

# NCCL's transport, interface and algorithm knobs (no plugin, file, or rendezvous address).
NCCL: Final = ("NCCL_SOCKET_IFNAME", "NCCL_SOCKET_NTHREADS", "NCCL_NSOCKS_PERTHREAD", "NCCL_IB_HCA",
               "NCCL_IB_DISABLE", "NCCL_IB_GID_INDEX", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_IB_SL",
               "NCCL_IB_TC", "NCCL_IB_QPS_PER_CONNECTION", "NCCL_NET_GDR_LEVEL", "NCCL_NET_GDR_READ",
               "NCCL_CROSS_NIC", "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_CUMEM_ENABLE",
               "NCCL_NVLS_ENABLE", "NCCL_ALGO", "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS",
               "NCCL_BUFFSIZE", "NCCL_NTHREADS", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")
# vLLM's variables that only tune kernels, timeouts and logging (vllm/envs.py, 0.32).
VLLM: Final = ("VLLM_LOGGING_LEVEL", "VLLM_LOGGING_COLOR", "VLLM_LOG_STATS_INTERVAL", "VLLM_LOG_BATCHSIZE_INTERVAL",
               "VLLM_DISABLE_LOG_LOGO", "VLLM_NO_USAGE_STATS", "VLLM_DO_NOT_TRACK", "VLLM_ENGINE_READY_TIMEOUT_S",
               "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS",
               "VLLM_HTTP_TIMEOUT_KEEP_ALIVE", "VLLM_IMAGE_FETCH_TIMEOUT", "VLLM_VIDEO_FETCH_TIMEOUT",
               "VLLM_AUDIO_FETCH_TIMEOUT", "VLLM_MEDIA_LOADING_THREAD_COUNT", "VLLM_TOOL_PARSE_REGEX_TIMEOUT_SECONDS",
               "VLLM_CHAT_TEMPLATE_RENDER_TIMEOUT", "VLLM_ENFORCE_STRICT_TOOL_CALLING", "VLLM_WORKER_MULTIPROC_METHOD",
               "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_USE_DEEP_GEMM",
               "VLLM_MOE_USE_DEEP_GEMM", "VLLM_USE_FLASHINFER_SAMPLER", "VLLM_USE_TRITON_AWQ",
               "VLLM_MARLIN_USE_ATOMIC_ADD", "VLLM_MLA_DISABLE", "VLLM_FLOAT32_MATMUL_PRECISION",
               "VLLM_ENABLE_CUDAGRAPH_GC", "VLLM_DISABLE_PYNCCL", "VLLM_ALLREDUCE_USE_SYMM_MEM",
               "VLLM_USE_NCCL_SYMM_MEM", "VLLM_SKIP_P2P_CHECK")
# Threads, allocators and CUDA launch settings of the libraries under vLLM.
LIBRARIES: Final = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "TRANSFORMERS_VERBOSITY",
                    "DO_NOT_TRACK", "GLOO_SOCKET_IFNAME", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                    "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_AVOID_RECORD_STREAMS", "CUDA_DEVICE_MAX_CONNECTIONS",
                    "CUDA_LAUNCH_BLOCKING")
ALLOWED: Final = frozenset((*NCCL, *VLLM, *LIBRARIES))


def unlisted_variable(names: Iterable[str]) -> str | None:
    """The first name ExtraEnv may not set because this list does not name it, or None."""
    return next((name for name in names if name not in ALLOWED), None)


def check_listed_env(names: Iterable[str]) -> None:
    """Refuse, in one line, a variable the allow-list does not name (names match exactly, as the engine reads
    them)."""
    name = unlisted_variable(names)
    if name is not None:
        raise UserInputError(
            f"ExtraEnv may not set {shown(name)}: ExtraEnv takes only the engine tuning variables Berth lists "
            f"({', '.join(sorted(ALLOWED))}); an operator sets others on the node agent.")
