"""A LiteLLM standby: runs in LiteLLM's own virtualenv (`python -m gateway.litellm_hooks.standby`), does LiteLLM's
imports ahead of time (about 8 s of CPU, 20-45 s on a busy machine: most of a cold start) and then waits
for the one proxy it will become.

Its node agent (activities/litellm_standby.py) starts it under the environment every LiteLLM of that agent
shares (activities/litellm_service.py `shared_environment`: no endpoint's values, no secret), and later writes
one JSON line to its stdin: the argv, environment, working directory and log file that a cold start would
have used. The standby then becomes exactly that process — the log on stdout and stderr, the full environment,
`litellm`'s own command-line entry point — so the node agent owns, watches, stops and adopts it like any
other front: it was spawned in its own session, and its pid is the one the agent spawned.

Until then it dies with its agent (the kernel's parent-death signal, cleared at the handover: a proxy
outlives its agent and is adopted), and end of stdin without an order (the agent stopped it) ends it.
The order arrives over a pipe only the node agent holds: the master key in it never touches argv, a file or a log."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from typing import Any, Final

ORDER_LIMIT_BYTES: Final = 1024 * 1024  # an order is a few KiB; a line longer than this is not one
READY_LINE: Final = "litellm standby: imported, waiting for its proxy"  # in the standby's log
PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>


def _die_with_parent(signal_number: int, parent: int) -> None:
    """prctl(PR_SET_PDEATHSIG): SIGKILL when the agent dies (0 clears it). If the agent died before the
    call, nothing would ever send it: then leave now."""
    libc: Final = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if signal_number and os.getppid() != parent:
        raise SystemExit(0)


def _read_order() -> dict[str, Any] | None:
    line: Final = sys.stdin.buffer.readline(ORDER_LIMIT_BYTES)
    if not line:
        return None
    order = json.loads(line)
    if not isinstance(order, dict) or not all(key in order for key in ("argv", "environment", "cwd", "log")):
        raise SystemExit("litellm standby: the order is not {argv, environment, cwd, log}")
    return order


def _become(order: dict[str, Any]) -> None:
    """The process a cold start would have been: output, directory, environment, argv."""
    log: Final = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null: Final = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["environment"])
    sys.argv = list(order["argv"])


def main() -> None:
    if sys.argv[1:2] != ["--parent"] or len(sys.argv) != 3 or not sys.argv[2].isdigit():
        raise SystemExit("usage: python -P -m gateway.litellm_hooks.standby --parent PID (a node agent starts this)")
    parent: Final = int(sys.argv[2])
    _die_with_parent(signal.SIGKILL, parent)
    # The slow part, before any order can arrive: the proxy app and its command line.
    started: Final = time.monotonic()
    import litellm.proxy.proxy_server  # noqa: F401
    from litellm.proxy.proxy_cli import run_server

    print(f"{READY_LINE} (imported in {time.monotonic() - started:.1f} s)", flush=True)
    order: Final = _read_order()
    if order is None:
        return
    _die_with_parent(0, parent)  # a proxy now: it outlives its agent, whose successor adopts it
    _become(order)
    # `litellm`'s console script is `sys.exit(run_server())`; click parses sys.argv[1:] the same way.
    run_server.main(args=sys.argv[1:], prog_name="litellm")


if __name__ == "__main__":
    main()
