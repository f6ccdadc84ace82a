"""Ranks as the rank user in their own mount namespace (activities/rank_jail.py, rank/jail.py): the plan hides
the state dir and every directory the rank user could not pass through, binding back only what the engine
needs; a jailed process runs as that user, sees no key, writes only its run dir; a failure is one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from activities.rank_jail import (
    RankUser,
    engine_paths,
    ensure_rank_user,
    give,
    give_top,
    jailed,
    model_paths,
    plan,
    probe,
    traversable,
)
from node.agent import rank_user

ROOT = os.geteuid() == 0
USER = RankUser("berth-rank", 999, 999)


def outer_hidden(path: Path) -> set[str]:
    """The first directory above `path` a rank user could not pass (pytest's 0700 base temp, run as root)."""
    return next(({str(a)} for a in list(reversed(path.parents))[1:] if not traversable(a)), set())


def tree(tmp_path: Path) -> dict[str, Path]:
    """A checkout (0700, as mktemp makes it) holding an engine, and a 0700 state dir with keys and a run dir."""
    checkout = tmp_path / "checkout"
    (checkout / "venv" / "bin").mkdir(parents=True)
    (checkout / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (checkout / "code").mkdir()
    (checkout / "linked").symlink_to(checkout / "code")
    state = tmp_path / "state"
    (state / "keys").mkdir(parents=True)
    (state / "keys" / "replica.key").write_text("secret")
    (state / "nodes" / "n1" / "ranks" / "c-r0").mkdir(parents=True)
    (state / "models" / "m").mkdir(parents=True)
    for private in (checkout, state):
        private.chmod(0o700)
    tmp_path.chmod(0o755)
    return {"checkout": checkout, "state": state, "run": state / "nodes" / "n1" / "ranks" / "c-r0",
            "model": state / "models" / "m"}


def test_the_plan_hides_the_state_dir_and_unpassable_directories_and_binds_back_what_is_needed(
        tmp_path: Path) -> None:
    paths = tree(tmp_path)
    checkout = paths["checkout"]
    made = plan(USER, [checkout, paths["model"]], [paths["run"]], [paths["state"]])
    # The 0700 checkout is hidden and bound back child by child (a bind keeps a 0700 mode); its symlink is made
    # again; the state dir is hidden but for the run dir (writable) and the model (read-only).
    expected = {str(checkout), str(paths["state"])} | outer_hidden(tmp_path)
    assert set(made["hide"]) == expected  # type: ignore[arg-type]
    assert made["read_only"] == sorted([str(checkout / "code"), str(checkout / "venv"), str(paths["model"])])
    assert made["writable"] == [str(paths["run"])]
    assert made["links"] == [[str(checkout / "linked"), str(checkout / "code")]]
    assert (made["uid"], made["gid"]) == (999, 999)


def test_a_read_only_path_inside_a_bound_one_is_not_bound_twice(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "inner").mkdir(parents=True)
    made = plan(USER, [shared, shared / "inner"], [], [])
    assert made["read_only"] == [str(shared)] and set(made["hide"]) == outer_hidden(tmp_path)  # type: ignore[arg-type]


def test_the_engine_needs_its_virtualenv_its_python_and_its_pythonpath(tmp_path: Path) -> None:
    found = engine_paths([sys.executable, "-m", "simulator"], {"PYTHONPATH": f"{tmp_path}{os.pathsep}"})
    venv = Path(sys.executable).parent.parent
    assert venv in found and tmp_path in found
    assert Path(os.path.realpath(sys.executable)).parent.parent in found  # the Python it was made from
    assert model_paths(tmp_path / "no-weights") == set()  # a dry run's simulator reads none


def test_a_module_the_engine_runs_with_dash_m_is_found_where_this_interpreter_finds_it() -> None:
    """Berth installed editable (CI's fresh clone): the simulator's source is in the checkout, which the venv does
    not cover and, in a 0700 clone, the jail would hide."""
    import simulator

    package = Path(simulator.__file__).parent
    assert package in engine_paths([sys.executable, "-P", "-m", "simulator", "--port", "1"], {})
    assert package not in engine_paths(["/usr/bin/python3", "-m", "simulator"], {})  # another interpreter's


def run_jailed(code: str, paths: dict[str, Path], user: RankUser) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": ""}
    read_only = engine_paths([sys.executable], env)
    argv = jailed([sys.executable, "-P", "-c", code], plan(user, read_only, [paths["run"]], [paths["state"]]), env)
    os.chown(paths["run"], user.uid, user.gid)
    return subprocess.run(argv, env=env, cwd=paths["run"], capture_output=True, text=True, timeout=60)


def test_a_jailed_rank_runs_as_the_rank_user_sees_no_key_and_writes_only_its_run_dir(tmp_path: Path) -> None:
    if not ROOT:
        # Only root can change users: the agent then runs ranks as itself and says so (the documented fallback).
        assert rank_user() is None
        return
    user = ensure_rank_user("berth-rank")
    assert probe(user) is None
    paths = tree(tmp_path)
    state = paths["state"]
    code = (f"import os; print(os.getuid(), sorted(os.listdir({str(state)!r})), "
            f"os.path.exists({str(state / 'keys' / 'replica.key')!r}), 'PLAN' + str('BERTH_RANK_JAIL' in os.environ));"
            f"open({str(paths['run'] / 'out')!r}, 'w').write('ok')")
    done = run_jailed(code, paths, user)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(user.uid), "['nodes']", "False", "PLANFalse"], done.stdout
    assert (paths["run"] / "out").read_text() == "ok"
    # Writing outside its run dir is refused (the checkout's code is bound back read-only, the rest hidden).
    refused = run_jailed(f"open({str(tmp_path / 'elsewhere')!r}, 'w')", paths, user)
    assert refused.returncode != 0 and "PermissionError" in refused.stderr


def test_a_jail_that_cannot_be_built_fails_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    broken = {"uid": 999, "gid": 999, "hide": [], "read_only": [str(tmp_path / "missing")], "writable": []}
    done = subprocess.run(jailed(["true"], broken, env), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 126
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("berth rank jail: could not start the rank as uid 999")
    usage = subprocess.run([sys.executable, "-P", str(Path(jailed(["x"], {}, {})[2]))], capture_output=True, text=True,
                           timeout=60, env={})
    assert usage.returncode == 126 and "a node agent starts this" in usage.stderr


def test_root_is_never_the_rank_user() -> None:
    if ROOT:
        with pytest.raises(ValueError, match="is root: ranks would hold every key"):
            ensure_rank_user("root")


def test_give_takes_a_whole_tree_and_give_top_only_the_top(tmp_path: Path) -> None:
    """The agent gives the engine cache whole once at start; a rank start gives only its top, so it does not
    walk thousands of cache files (what ranks write there since is the rank user's already)."""
    cache, run = tmp_path / "cache", tmp_path / "run"
    (cache / "inner").mkdir(parents=True)
    (cache / "inner" / "kernel.so").write_text("x")
    me = RankUser("me", os.getuid(), os.getgid())
    owner = USER if ROOT else me  # only root can hand files to another user
    give_top(owner, cache)
    assert os.lstat(cache).st_uid == owner.uid
    assert os.lstat(cache / "inner" / "kernel.so").st_uid == os.getuid()  # not walked
    give(owner, [cache, run])
    assert run.is_dir()
    for path in (cache, cache / "inner", cache / "inner" / "kernel.so", run):
        assert os.lstat(path).st_uid == owner.uid, path
