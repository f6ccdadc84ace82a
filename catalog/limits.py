"""Size bounds on a catalog submission: no value costs the API more to check than it can afford, and
nothing reaches `exec` on a node that the kernel would refuse there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from berth.errors import UserInputError

# Any one parameter value (a string, ExtraArgs, ExtraEnv): a few KiB is far more than any vLLM flag
# set needs, and checking it (shlex) stays well under a millisecond. Unbounded, shlex.split is
# quadratic: 1 MB of ExtraArgs held the API's event loop for 32 s (issue 11 item 3).
MAX_VALUE_CHARS = 4096
# An entry or parameter name: longer than any real one, short enough for difflib's suggestions.
MAX_NAME_CHARS = 128
# Linux refuses execve when one argv element or environment entry is longer than this (bytes,
# with its terminating NUL): MAX_ARG_STRLEN = 32 pages.
MAX_ARG_STRLEN = 131072
# The whole argv + environment a rank's engine may get from its definition; ARG_MAX is commonly
# 2 MiB and the node agent adds its own variables, so a definition keeps to half of it.
MAX_EXEC_BYTES = 1024 * 1024


def check_value_length(name: str, text: str) -> None:
    if len(text) > MAX_VALUE_CHARS:
        raise UserInputError(
            f"{name} is {len(text)} characters long; a value may be at most {MAX_VALUE_CHARS}. "
            "Shorten it (long settings belong in a file the model reads, not on its command line).")


def check_name_length(kind: str, name: str) -> None:
    if len(name) > MAX_NAME_CHARS:
        raise UserInputError(f"{kind} name is {len(name)} characters long; names are at most {MAX_NAME_CHARS}. "
                             "Check the name (`berth workflow catalog list` shows the entries).")


def check_exec_size(args: Iterable[str], env: Mapping[str, str]) -> None:
    """Refuse at submission an argv or environment that `exec` on the node would refuse (E2BIG)."""
    total = 0
    for what, item in [*(("argument", a) for a in args), *(("variable", f"{k}={v}") for k, v in env.items())]:
        size = len(item.encode()) + 1
        if size > MAX_ARG_STRLEN:
            raise ValueError(f"one engine {what} is {size} bytes; the kernel refuses more than "
                             f"{MAX_ARG_STRLEN} per argument or variable")
        total += size
    if total > MAX_EXEC_BYTES:
        raise ValueError(f"the engine's arguments and environment are {total} bytes; at most "
                         f"{MAX_EXEC_BYTES} are allowed")
