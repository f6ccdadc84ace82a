"""A LiteLLM standby (a zygote): runs in LiteLLM's own virtualenv (`python -m gateway.litellm_hooks.standby`), does
LiteLLM's imports once (about 8 s of CPU, 20-45 s on a busy machine: most of a cold start) and then forks one
process for each LiteLLM its node agent starts, for the agent's whole life.

Its node agent (activities/litellm_standby.py) starts it under the environment every LiteLLM of that agent
shares (activities/litellm_service.py `shared_environment`: no endpoint's values, no secret), and writes one JSON
line to its stdin per launch: the argv, environment, working directory, log file and priority a cold start would
have used. The standby forks, and the child becomes exactly that process — its own session, the log on stdout and
stderr, the full environment, `litellm`'s own command-line entry point — so the node agent owns, watches, stops
and adopts it like any other front. Where the agent jails its LiteLLMs (it is root), the order carries the jail's
plan and the child enters it before anything else of its order: the rank user, in its own mount namespace, as a
cold start through rank/jail.py would be. The standby answers on its stdout, one JSON line each: `{"pid": N}` for a
fork, and `{"exited": N, "code": C}` when a child ends (C as subprocess reports it: negative for a signal), since
only a parent can know a child's exit status.

The standby dies with its agent (the kernel's parent-death signal) and ends when its stdin does (the agent
stopped it); a forked proxy outlives both (the kernel clears that signal in a fork's child) and a restarted
agent adopts it. The orders arrive over a pipe only the node agent holds: the master key in them never touches
argv, a file or a log. Only the main thread runs here until a fork (no thread is started by the imports under
the shared environment), so each child starts from a consistent interpreter."""

from __future__ import annotations

import ctypes
import gc
import json
import os
import selectors
import signal
import sys
import time
from typing import Any, Final

ORDER_LIMIT_BYTES: Final = 1024 * 1024  # an order is a few KiB; a line longer than this is not one
READY_LINE: Final = "litellm standby: imported, waiting for its proxies"  # in the standby's log, once
FORKED_LINE: Final = "litellm standby: forked"  # in the standby's log, once per child
PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
ORDER_KEYS: Final = ("argv", "environment", "cwd", "log")


def _die_with_parent(signal_number: int, parent: int) -> None:
    """prctl(PR_SET_PDEATHSIG): SIGKILL when the agent dies. If the agent died before the call, nothing would
    ever send it: then leave now."""
    libc: Final = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal_number, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise SystemExit(0)


def _parse_order(line: bytes) -> dict[str, Any]:
    order = json.loads(line)
    if not isinstance(order, dict) or not all(key in order for key in ORDER_KEYS):
        raise SystemExit("litellm standby: an order is not {argv, environment, cwd, log}")
    return order


def _become(order: dict[str, Any], session_made: int) -> None:
    """In a forked child: the process a cold start would have been: session, priority, output, directory,
    environment, argv. Closing `session_made` tells the standby its group exists (see _Zygote._fork)."""
    os.setsid()  # its own session and group, as a cold front's: the pid the agent records is its group's
    os.close(session_made)
    niceness = order.get("niceness")
    if isinstance(niceness, int):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, niceness)  # the standby imports at a lower priority
        except OSError:
            pass  # not allowed to raise it: it serves at the standby's
    log: Final = os.open(order["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    null: Final = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    if order.get("jail") is not None:
        _enter_jail(order["jail"], order["cwd"])
    os.chdir(order["cwd"])
    os.environ.clear()
    os.environ.update(order["environment"])
    sys.argv = list(order["argv"])


def _enter_jail(jail: dict[str, Any], cwd: str) -> None:
    """Become the launch's rank user in its own mount namespace, as a cold start through rank/jail.py would (the
    node agent made the plan: activities/rank_jail.py). The jail's file is run from its source, as `python jail.py`
    and the Slurm launcher run it: nothing of it is imported from a place the user could write. One line in the log
    and exit status 126 when it cannot be built: the front fails with that line."""
    path: Final = jail["script"]
    module: Final[dict[str, Any]] = {"__name__": "berth_rank_jail", "__file__": path}
    with open(path, "rb") as source:
        exec(compile(source.read(), path, "exec"), module)  # noqa: S102 — Berth's own file, named by the agent
    try:
        os.chdir(cwd)  # bound back in the new namespace at the same path
        module["build"](jail["plan"])
    except (module["JailError"], OSError, ValueError, KeyError) as error:
        print(f"berth rank jail: could not start LiteLLM as uid {jail['plan'].get('uid')}: {error}", flush=True)
        os._exit(module["FAILED"])


class _Zygote:
    """The fork loop: orders in on stdin, replies out on `replies`, children reaped as SIGCHLD says."""

    def __init__(self, replies: int) -> None:
        self.replies: Final = replies
        self.wake_read, self.wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.selector: Final = selectors.DefaultSelector()
        # Orders are read into this one buffer and scrubbed after each fork: the next fork's copy of this
        # process's memory holds no earlier launch's master key (os.read's bytes would be freed, not zeroed).
        self.buffer: Final = bytearray(ORDER_LIMIT_BYTES)
        self.filled = 0

    def _reply(self, message: dict[str, int]) -> None:
        data = json.dumps(message).encode() + b"\n"
        while data:
            data = data[os.write(self.replies, data):]

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self._reply({"exited": pid, "code": os.waitstatus_to_exitcode(status)})

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_read, 512):
                pass
        except BlockingIOError:
            pass  # empty

    def _close(self) -> None:
        """What only the standby's loop uses; a child closes it too before it becomes its proxy."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        self.selector.close()
        for fd in (self.wake_read, self.wake_write, self.replies):
            os.close(fd)

    def _read_orders(self) -> bool:
        """Read what stdin has into the buffer; False at its end."""
        if self.filled == len(self.buffer):
            raise SystemExit("litellm standby: an order longer than its limit")
        count = os.readv(0, [memoryview(self.buffer)[self.filled:]])
        self.filled += count
        return count > 0

    def _next_line(self) -> int | None:
        """The length of the first whole order in the buffer (its newline excluded), or None."""
        end = self.buffer.find(b"\n", 0, self.filled)
        return None if end < 0 else end

    def _scrub(self, end: int) -> None:
        """Drop the first order (and its newline) from the buffer, and zero the bytes it no longer holds."""
        rest = self.filled - end - 1
        self.buffer[:rest] = self.buffer[end + 1:self.filled]
        self.buffer[rest:self.filled] = bytes(self.filled - rest)
        self.filled = rest

    def _fork(self, end: int) -> tuple[dict[str, Any], int] | None:
        """Fork the first order. In the child: its order and the descriptor it closes once it has its own session.
        In the standby: None, once the child's session exists (or the child is gone) — so the pid the agent hears
        is a process group it can stop at once (a kill sent to the group before the child's setsid would find no
        group, and the fork would serve on unowned)."""
        session_read, session_made = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child reads its order; the standby never parses one
            os.close(session_read)
            order = _parse_order(bytes(self.buffer[:end]))
            self._close()
            return order, session_made
        os.close(session_made)
        self._scrub(end)
        try:
            os.read(session_read, 1)  # end of file: the child closed its end after setsid(), or died
        finally:
            os.close(session_read)
        print(f"{FORKED_LINE} pid {pid}", flush=True)
        self._reply({"pid": pid})
        return None

    def serve(self) -> tuple[dict[str, Any], int] | None:
        """Fork for each order until stdin ends (None: the standby leaves). Returns in each forked child with
        its order (the loop's descriptors and signal handling closed), which it then becomes."""
        signal.signal(signal.SIGCHLD, lambda _number, _frame: None)  # the wakeup descriptor is the event
        signal.set_wakeup_fd(self.wake_write, warn_on_full_buffer=False)
        self.selector.register(0, selectors.EVENT_READ)
        self.selector.register(self.wake_read, selectors.EVENT_READ)
        self._reap()  # a child that ended before the handler was set
        while True:
            for key, _events in self.selector.select():
                if key.fd == self.wake_read:
                    self._drain_wakeups()
                    self._reap()
                    continue
                if not self._read_orders():
                    self._close()
                    return None  # the agent stopped it: its proxies serve on, a restarted agent adopts them
                while (end := self._next_line()) is not None:
                    forked = self._fork(end)
                    if forked is not None:
                        return forked


def _freeze() -> int:
    """What the imports made (~730,000 objects), frozen out of every later collection of the standby and of each
    fork (`gc.freeze`, as Python's documentation advises before a fork): a fork's collector never writes to those
    objects, so their pages stay shared with the standby instead of being copied into each LiteLLM, and a full
    collection under load walks what the fork made, not LiteLLM's modules (a 0.34 s pause a walk, measured)."""
    gc.collect()
    gc.freeze()
    gc.enable()
    return gc.get_freeze_count()


def main() -> None:
    if sys.argv[1:2] != ["--parent"] or len(sys.argv) != 3 or not sys.argv[2].isdigit():
        raise SystemExit("usage: python -P -m gateway.litellm_hooks.standby --parent PID (a node agent starts this)")
    parent: Final = int(sys.argv[2])
    _die_with_parent(signal.SIGKILL, parent)
    # stdout is the pipe to the agent: keep it for the replies alone, and send what anything prints to the log.
    replies: Final = os.dup(1)
    os.set_inheritable(replies, False)
    os.dup2(2, 1)
    # The slow part, before any order is read: the proxy app and its command line.
    started: Final = time.monotonic()
    gc.disable()  # no collection while importing: what the imports leave stays packed for the forks to share
    import litellm.proxy.proxy_server  # noqa: F401
    from litellm.proxy.proxy_cli import run_server

    frozen: Final = _freeze()
    print(f"{READY_LINE} (imported in {time.monotonic() - started:.1f} s; {frozen} objects frozen)", flush=True)
    forked: Final = _Zygote(replies).serve()
    if forked is None:
        return
    _become(*forked)
    # `litellm`'s console script is `sys.exit(run_server())`; click parses sys.argv[1:] the same way.
    run_server.main(args=sys.argv[1:], prog_name="litellm")


if __name__ == "__main__":
    main()
