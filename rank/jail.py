"""Start a rank as the rank user, in its own mount namespace that shows it only what it needs, then become the
engine (`exec`: the pid the node agent spawned and watches stays the rank's).

Run by the node agent, as root, as a script (`python -P rank/jail.py ARGV…`): the standard library only, like
the rest of this folder. The plan (activities/rank_jail.py) comes in the environment variable below, which is
removed before the engine starts. A Slurm job's launcher (rank/slurm_rank.py, root too) loads this file and calls
`build` in its own process instead: one interpreter start fewer before the engine. In the new namespace, made
private so nothing leaks back to the host:

- every `hide` path gets an empty tmpfs over it (the state dir with the cluster's keys, and each directory a
  rank user could not pass through anyway: /root, a 0700 checkout, pytest's 0700 base temp);
- every `read_only` and `writable` path is bound back at its own absolute path, from a descriptor opened
  in the new namespace before anything was hidden (a virtualenv's python, its shebangs and pyvenv.cfg keep working);
- the read-only ones are made read-only, then the process drops to the rank user (no supplementary groups,
  no new privileges) and execs the engine.

Every failure is one line on stderr (the rank's log) and exit status 126: the copy fails with that line."""

from __future__ import annotations

import ctypes
import json
import os
import sys
from pathlib import Path

PLAN_VARIABLE = "BERTH_RANK_JAIL"
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
FAILED = 126  # the shell's "found but could not run"


class JailError(Exception):
    """One line: what could not be set up, and the system's reason."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(what: str, result: int) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise JailError(f"{what}: {os.strerror(errno)}")


def _mount(libc: ctypes.CDLL, source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    _call(f"mount {target}", libc.mount(_bytes(source), target.encode(), _bytes(fstype), flags, _bytes(data)))


def _bytes(value: str | None) -> bytes | None:
    return value.encode() if value is not None else None


def _mountpoint(path: str, like: int) -> None:
    """An empty directory or file at `path` (inside a hidden tmpfs) to bind `like` onto."""
    if os.path.lexists(path):
        return
    if os.path.isdir(f"/proc/self/fd/{like}"):
        os.makedirs(path, mode=0o755, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))


def build(plan: dict[str, object]) -> None:
    """The namespace of the plan (as root); see the module's docstring."""
    libc = _libc()
    bound = [str(p) for p in plan["read_only"]] + [str(p) for p in plan["writable"]]  # type: ignore[attr-defined]
    _call("unshare(CLONE_NEWNS)", libc.unshare(CLONE_NEWNS))
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    # Opened in the new namespace (a bind's source must be in it), before anything is hidden.
    descriptors = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in bound}
    hidden = [str(p) for p in plan["hide"]]  # type: ignore[attr-defined]
    # Outermost first; at one depth, a hide before a bind (a hidden dir's own children are bound into it).
    steps = sorted([(len(Path(p).parts), 0, p) for p in hidden] + [(len(Path(p).parts), 1, p) for p in bound])
    for _depth, kind, path in steps:
        if kind == 0:
            os.makedirs(path, mode=0o755, exist_ok=True)  # inside an outer hidden dir it is gone: made again
            _mount(libc, "tmpfs", path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
        else:
            _mountpoint(path, descriptors[path])
            _mount(libc, f"/proc/self/fd/{descriptors[path]}", path, None, MS_BIND | MS_REC)
    for link, target in plan.get("links", []):  # type: ignore[attr-defined]
        if not os.path.lexists(link):  # a hidden directory's symlinked child, made again in its tmpfs
            os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
            os.symlink(target, link)
    for path in plan["read_only"]:  # type: ignore[attr-defined]
        _mount(libc, None, str(path), None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    for descriptor in descriptors.values():
        os.close(descriptor)
    _call("prctl(PR_SET_NO_NEW_PRIVS)", libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
    os.setgroups([])
    os.setgid(int(plan["gid"]))  # type: ignore[call-overload]
    os.setuid(int(plan["uid"]))  # type: ignore[call-overload]


def main() -> int:
    argv = sys.argv[1:]
    raw = os.environ.pop(PLAN_VARIABLE, "")
    if not argv or not raw:
        print("berth rank jail: usage: BERTH_RANK_JAIL=PLAN jail.py ARGV… (a node agent starts this)",
              file=sys.stderr)
        return FAILED
    try:
        plan = json.loads(raw)
        cwd = os.getcwd()
        build(plan)
        os.chdir(cwd)  # the run dir, as bound back
        os.execvp(argv[0], argv)
    except (JailError, OSError, ValueError, KeyError) as error:
        print(f"berth rank jail: could not start the rank as {plan_user(raw)}: {error}", file=sys.stderr)
    return FAILED


def plan_user(raw: str) -> str:
    try:
        return f"uid {json.loads(raw)['uid']}"
    except (ValueError, KeyError, TypeError):
        return "the rank user"


if __name__ == "__main__":
    sys.exit(main())
