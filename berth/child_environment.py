"""Child environments: which variables a process Berth starts inherits, and which a user may add to a rank.

A rank or service runs code a user influences (their model, their flags, their `ExtraEnv`), so it never
inherits its parent's environment whole: the node agent's holds the cluster's admin token and the state
dir that holds the signing and data keys. A child gets a few named variables of its parent's, engine
knobs the operator set that name no credential, and what Berth itself sets for it. Users add engine
knobs only: names a family below allows that point at no file and carry no credential.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

# What every child may inherit: where programs and certificates are, locale, time zone, scratch.
BASE_VARIABLES: Final = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR")
# The operator's settings for Berth's own Python (children run `python -P -m …`): where Berth is
# (PYTHONPATH: how an operator, or the test suite, points Berth at a checkout) and output flags. Set
# by whoever started the agent, never by a user: ExtraEnv refuses every PYTHON* name.
PYTHON_SETTINGS: Final = ("PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE")

# Families of engine settings (vLLM, its collectives, Hugging Face, OpenMP, PyTorch, CUDA): what a
# rank inherits from its node agent and what `ExtraEnv` may set, minus the refusals below.
ENGINE_PREFIXES: Final = ("VLLM_", "NCCL_", "GLOO_", "UCX_", "HF_", "OMP_", "MKL_", "KMP_", "TORCH_",
                          "PYTORCH_", "TORCHINDUCTOR_", "TRITON_", "CUDA_")
ENGINE_NAMES: Final = ("TOKENIZERS_PARALLELISM", "TRANSFORMERS_OFFLINE", "TRANSFORMERS_VERBOSITY", "DO_NOT_TRACK")

# A name with one of these words carries a credential: never inherited, never set by a user (a
# gated model's token comes from HfTokenSecret, resolved on the node).
CREDENTIAL_WORDS: Final = frozenset({"TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL",
                                     "CREDENTIALS", "AUTH"})
# A name with one of these words points the engine at a file or a library on the node (NCCL_NET_PLUGIN
# loads one, NCCL_DEBUG_FILE overwrites one, VLLM_LOGGING_CONFIG_PATH's dictConfig instantiates any
# class): a user may not choose them; the operator may.
LOCATION_WORDS: Final = frozenset({"PATH", "DIR", "DIRS", "DIRECTORY", "FOLDER", "ROOT", "HOME", "FILE", "OUT",
                                   "OUTPUT", "PLUGIN", "PLUGINS", "LIBRARY", "LIBRARIES", "CACHE", "PREFIX"})
# A name with one of these words has the engine import or trust code by name (HF_DATASETS_TRUST_REMOTE_CODE).
CODE_WORDS: Final = frozenset({"TRUST", "MODULE", "MODULES", "CLASS", "CLS", "IMPORT"})

# Refused whole families, checked first so the message says why.
_REFUSED_PREFIXES: Final = (
    ("LD_", "the dynamic loader would load a library of the sender's choosing"),
    ("DYLD_", "the dynamic loader would load a library of the sender's choosing"),
    ("PYTHON", "Python reads it at start-up and can be made to import and run any module"),
    ("PERL", "Perl reads it at start-up and can be made to run any code"),
    ("BERTH_", "BERTH_ names are Berth's own settings"),
)
_REFUSED_NAMES: Final = {
    "BROWSER": "libraries run it as a program",
    "CUDA_VISIBLE_DEVICES": "Berth assigns each rank its GPUs",
    "CUDA_DEVICE_ORDER": "Berth assigns each rank its GPUs",
    "VLLM_ALLOW_INSECURE_SERIALIZATION": "it lets the engine unpickle, that is run, data it receives",
    "VLLM_SERVER_DEV_MODE": "it opens development routes that run methods of the caller's choosing",
    "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "it lets callers load adapters from any path on the node",
}
MAX_USER_VARIABLES: Final = 64
MAX_USER_VALUE_CHARS: Final = 4096
ALLOWED_SUMMARY: Final = (", ".join(f"{prefix}*" for prefix in ENGINE_PREFIXES) + ", "
                          + ", ".join(ENGINE_NAMES))


def _words(name: str) -> set[str]:
    return set(name.upper().split("_"))


def names_credential(name: str) -> bool:
    return bool(_words(name) & CREDENTIAL_WORDS)


def user_variable_problem(name: str) -> str | None:
    """Why a user may not set `name` for a rank (one clause), or None when they may."""
    upper = name.upper()
    if upper in _REFUSED_NAMES:
        return _REFUSED_NAMES[upper]
    for prefix, reason in _REFUSED_PREFIXES:
        if upper.startswith(prefix):
            return reason
    if names_credential(upper):
        return "it names a credential (give secrets through their own parameters, e.g. HfTokenSecret)"
    if _words(upper) & LOCATION_WORDS:
        return "it points the engine at a file or library on the node"
    if _words(upper) & CODE_WORDS:
        return "it has the engine import or trust code by name"
    if not (upper.startswith(ENGINE_PREFIXES) or upper in ENGINE_NAMES):
        return f"it is not an engine setting; allowed: {ALLOWED_SUMMARY}"
    return None


def user_environment_problem(pairs: Mapping[str, str], parameter: str = "ExtraEnv") -> str | None:
    """The first reason `pairs` may not reach a rank, as one sentence, or None when all may."""
    if len(pairs) > MAX_USER_VARIABLES:
        return f"{parameter} sets {len(pairs)} variables; at most {MAX_USER_VARIABLES} are allowed."
    for name, value in pairs.items():
        reason = user_variable_problem(name)
        if reason is not None:
            return f"{parameter} may not set {name}: {reason}."
        if len(value) > MAX_USER_VALUE_CHARS or "\0" in value:
            return (f"{parameter} {name} must be at most {MAX_USER_VALUE_CHARS} characters, without NUL; "
                    f"shorten it.")
    return None


def inherit(source: Mapping[str, str], names: Iterable[str] = BASE_VARIABLES,
            prefixes: Iterable[str] = ()) -> dict[str, str]:
    """The variables of `source` a child may see: `names` exactly, and those that start with one of
    `prefixes` unless they name a credential."""
    chosen = {name: source[name] for name in names if name in source}
    families = tuple(prefixes)
    if families:
        chosen.update({name: value for name, value in source.items()
                       if name.startswith(families) and not names_credential(name)})
    return chosen


def engine_environment(source: Mapping[str, str], simulator: bool = False) -> dict[str, str]:
    """What a rank inherits from its node agent: the base, the operator's Python settings, its engine
    knobs (no credential), and for the simulator its BERTH_SIM_* knobs (how tests slow it down)."""
    prefixes = ENGINE_PREFIXES + (("BERTH_SIM_",) if simulator else ())
    return inherit(source, (*BASE_VARIABLES, *PYTHON_SETTINGS, *ENGINE_NAMES), prefixes)
