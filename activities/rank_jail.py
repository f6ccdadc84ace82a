"""Ranks run as the rank user, seeing only what they need (issue 29): the plan for rank/jail.py.

A rank runs code a user influences (their model's files, their engine flags), so it must not be able to read
the cluster's keys, the admin token or another user's data. When the node agent runs as root, each rank starts
as an unprivileged user (BERTH_RANK_USER, `berth-rank` by default, created on first use) in a mount namespace
where the state dir is an empty directory except the rank's own run dir, the node's engine cache and the
model it serves, and every other directory a rank user could not pass through anyway (/root, a 0700 checkout,
pytest's base temp) is empty except what the engine needs read-only: its virtualenv, the Python that
virtualenv was made from, the folders on its PYTHONPATH (the copy guard's among them). Paths stay the same, so
nothing in the engine's command line or environment changes.

The rank user is what the jail is proven with: each user's ranks run as a uid of their own
(activities/rank_identities.py), so one user's code never reaches another user's processes or engine cache.

An agent that is not root cannot change users: its ranks run as itself (the keys are then protected by their
file modes only), and it says so once at start. So does a root agent whose kernel refuses mount namespaces."""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from berth.processes import script_interpreter
from rank import GUARD_DIR

log = logging.getLogger("berth.node.rank_jail")

JAIL_SCRIPT = GUARD_DIR / "jail.py"
PLAN_VARIABLE = "BERTH_RANK_JAIL"  # rank/jail.py's; it removes it before the engine starts
MODEL_LINKS_LIMIT = 10_000  # entries looked at for symlinked weights (a Hugging Face cache's snapshot)


@dataclass(frozen=True)
class RankUser:
    name: str
    uid: int
    gid: int


def ensure_rank_user(name: str) -> RankUser:
    """The rank user, created as a system user without a home or a login shell when it does not exist."""
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                        "/usr/sbin/nologin", "--user-group", name], check=True, capture_output=True, timeout=30)
        entry = pwd.getpwnam(name)
    if entry.pw_uid == 0:
        raise ValueError(f"BERTH_RANK_USER={name} is root: ranks would hold every key")
    return RankUser(name, entry.pw_uid, entry.pw_gid)


def traversable(path: Path) -> bool:
    """Whether any user may pass through `path` (others' execute bit)."""
    try:
        return bool(os.stat(path).st_mode & 0o001)
    except OSError:
        return False


def engine_paths(argv: Sequence[str], environ: Mapping[str, str]) -> set[Path]:
    """What the engine reads to start: its virtualenv, the Python it was made from, its PYTHONPATH."""
    found: set[Path] = set()
    executable = shutil.which(argv[0]) or argv[0]
    interpreter = script_interpreter(executable) or Path(executable)  # a script's Python, or a Python itself
    for program in (Path(executable), interpreter):
        venv = program.parent.parent  # <venv>/bin/<program>, unresolved: the virtualenv's own python
        if (venv / "pyvenv.cfg").exists():
            found.add(venv)
        real = Path(os.path.realpath(program))
        found.add(real.parent.parent)  # the installed Python's prefix (/usr, ~/.pyenv/versions/3.11.7)
    for entry in environ.get("PYTHONPATH", "").split(os.pathsep):
        if entry:
            found.add(Path(entry))
    found |= module_paths(argv)
    return {path for path in found if path.exists() and path != Path("/")}


def module_paths(argv: Sequence[str]) -> set[Path]:
    """Where `python -m MODULE` on this very interpreter (Berth's simulator) finds MODULE: with Berth installed
    editable, its source folder in the checkout, which neither the virtualenv nor PYTHONPATH names."""
    if len(argv) < 3 or argv[0] != sys.executable or "-m" not in argv[1:3]:
        return set()
    index = list(argv).index("-m")
    if index + 1 >= len(argv):
        return set()
    try:
        spec = importlib.util.find_spec(argv[index + 1].split(".")[0])
    except (ImportError, ValueError):
        return set()
    if spec is None:
        return set()
    if spec.submodule_search_locations:
        return {Path(location) for location in spec.submodule_search_locations}
    return {Path(spec.origin)} if spec.origin else set()


def model_paths(model_dir: Path) -> set[Path]:
    """The model's directory and the directories its symlinked files point into (a Hugging Face snapshot's
    blobs), looked at up to MODEL_LINKS_LIMIT entries."""
    if not model_dir.exists():
        return set()  # a dry run's simulator reads no weights
    found = {model_dir}
    for index, (root, _dirs, files) in enumerate(os.walk(model_dir)):
        if index > MODEL_LINKS_LIMIT:
            break
        for name in files:
            path = Path(root) / name
            if path.is_symlink():
                found.add(Path(os.path.realpath(path)).parent)
    return found


def plan(user: RankUser, read_only: Iterable[Path], writable: Iterable[Path],
         secret: Iterable[Path]) -> dict[str, object]:
    """rank/jail.py's plan: hide the secret dirs and, on the way to each needed path, the first directory the
    rank user could not pass through; a needed directory that is itself such a one is hidden and bound back
    child by child (a bind keeps its mode), its symlinks made again, its hidden children left out."""
    hidden: set[Path] = {_real(p) for p in secret}
    rw: set[Path] = {_real(p) for p in writable if p.exists()}
    ro: set[Path] = set()
    links: dict[Path, str] = {}
    queue = [_real(p) for p in read_only if p.exists()]
    while queue:
        path = queue.pop()
        if path in hidden or path in ro:
            continue
        if path.is_dir() and not traversable(path):
            hidden.add(path)
            for child in path.iterdir():
                if child.is_symlink():
                    links[child] = os.readlink(child)
                if child.exists():
                    queue.append(_real(child))
            continue
        ro.add(path)
    for path in (*ro, *rw, *links):
        for ancestor in reversed(path.parents):  # from the root down: the outermost one is enough
            if ancestor != Path("/") and not traversable(ancestor):
                hidden.add(ancestor)
                break
    # Inside a writable or read-only bind already (with no hidden directory in between): nothing to add.
    ro = {p for p in ro if not any(p == w or w in p.parents for w in rw) and not _covered(p, ro, hidden)}
    return {"uid": user.uid, "gid": user.gid, "hide": sorted(map(str, hidden)), "read_only": sorted(map(str, ro)),
            "writable": sorted(map(str, rw)), "links": sorted([str(k), v] for k, v in links.items())}


def _covered(path: Path, bound: set[Path], hidden: set[Path]) -> bool:
    return any(outer in path.parents and not any(outer in h.parents and (h == path or h in path.parents)
                                                 for h in hidden) for outer in bound)


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def jailed(argv: Sequence[str], plan_: Mapping[str, object], env: dict[str, str]) -> list[str]:
    """The argv that starts `argv` through the jail; puts the plan in `env` (the jail removes it)."""
    env[PLAN_VARIABLE] = json.dumps(plan_)
    return [sys.executable, "-P", str(JAIL_SCRIPT), *argv]


def unjailed(argv: Sequence[str], env: Mapping[str, str]) -> tuple[list[str], dict[str, str], dict[str, object] | None]:
    """What `jailed` wrapped: the argv it starts, the environment without the plan, and the plan (None, with both
    as given, for an argv not started through the jail). A LiteLLM forked from the node's standby enters the jail in
    the fork itself (gateway/litellm_hooks/standby.py)."""
    if tuple(argv[:3]) == (sys.executable, "-P", str(JAIL_SCRIPT)) and len(argv) > 3 and PLAN_VARIABLE in env:
        rest = dict(env)
        return list(argv[3:]), rest, json.loads(rest.pop(PLAN_VARIABLE))
    return list(argv), dict(env), None


def give(user: RankUser, paths: Iterable[Path]) -> None:
    """The rank user's own run dir and cache: each path and what it holds (the agent made them as root)."""
    for top in paths:
        top.mkdir(parents=True, exist_ok=True)
        for root, dirs, files in os.walk(top):
            for name in (root, *(os.path.join(root, d) for d in dirs), *(os.path.join(root, f) for f in files)):
                if os.lstat(name).st_uid != user.uid:
                    os.lchown(name, user.uid, user.gid)


def give_top(user: RankUser, path: Path) -> None:
    """`path` (made if missing) the rank user's, not what it holds."""
    path.mkdir(parents=True, exist_ok=True)
    if os.lstat(path).st_uid != user.uid:
        os.lchown(path, user.uid, user.gid)


def probe(user: RankUser) -> str | None:
    """None when a jailed `true` runs here, else why not (the agent then runs ranks as itself)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    argv = jailed(["true"], plan(user, [], [], []), env)
    try:
        done = subprocess.run(argv, env=env, cwd="/", capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as error:
        return str(error)
    if done.returncode == 0:
        return None
    return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]


def usable_rank_user(name: str, runner: str) -> RankUser | None:
    """Who the ranks `runner` starts run as (the agent, or the control worker for Slurm jobs): the rank user `name`
    in its own mount namespace when `runner` is root and the kernel allows it, else `runner`'s own user, said
    once here. `name` "none" (or empty) asks for the latter."""
    if name.lower() in ("", "none"):
        log.info("ranks run as %s's user (BERTH_RANK_USER=none)", runner)
        return None
    if os.geteuid() != 0:
        log.info("ranks run as %s's user: only %s running as root can start them as %s", runner, runner, name)
        return None
    try:
        user = ensure_rank_user(name)
    except (OSError, ValueError, subprocess.SubprocessError) as error:
        log.warning("ranks run as %s's user (root): the rank user %s is not usable: %s", runner, name, error)
        return None
    reason = probe(user)
    if reason is not None:
        log.warning("ranks run as %s's user (root): a rank cannot be started as %s here: %s", runner, name, reason)
        return None
    log.info("ranks run as %s (uid %d) in their own mount namespace", name, user.uid)
    return user
