"""A front process a user's values influence starts as its workflow's rank user (activities/rank_identities.py), in
its own mount namespace, as ranks do (activities/rank_jail.py, rank/jail.py): OpenCode is a coding agent with a bash
tool, so its owner can make it run any command. Started as the node agent's own user (root on a node) it could read
the cluster's keys in the state dir and act as root. Jailed, it sees of the state dir only its own data (its home
and workspace, writable, and its opencode.json, read-only), reads the binary it runs, and has the allow-listed
environment its launch built. A workspace Volume is given to the user of the workflow that starts on it.

A pool's LiteLLM and the model gateway are jailed too (activities/launches.py `front_jail`): each parses every
request strangers send through its endpoint, so an exploit of it must find no more than a rank would. A LiteLLM
forked from the node's standby enters the same jail in the fork (gateway/litellm_hooks/standby.py).

An agent that is not root (or whose rank user is not usable: node/agent.py's rank_user) starts it as itself,
as it does ranks."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

from activities.front_launch import FrontLaunch
from activities.rank_identities import user_environment
from activities.rank_jail import RankUser, give, jailed, plan
from berth.processes import plain_directory


def jailed_launch(user: RankUser, launch: FrontLaunch, state_root: Path) -> FrontLaunch:
    """`launch` started through rank/jail.py as `user`, seeing nothing of `state_root` but what its FrontJail
    names. Blocking file work (it gives the writable directories): run it in a thread."""
    needs = launch.jail
    assert needs is not None, "only a launch that says what it needs is jailed"
    give(user, needs.writable)
    for kept in needs.kept:  # given above with the rest of its parent: taken back, readable, not writable
        top = next(path for path in needs.writable if path in kept.parents)
        plain_directory(top, kept)  # a link the service's previous run left there is not followed
        os.chown(kept, os.getuid(), os.getgid())
        kept.chmod(0o755)
    for shared in needs.shared:  # the agent's file, the agent's to write: the user's group may read it
        os.chown(shared, os.getuid(), user.gid, follow_symlinks=False)
        shared.chmod(0o640)
    # The program by its real path: the symlinks on the way to it (a checkout's .tools) may lie in a directory
    # the jail hides. Not a virtualenv's python (the model gateway's): started by its real path it would not be
    # that virtualenv's; its own directory and the Python it links to are both bound (engine_paths).
    found = shutil.which(launch.argv[0]) or launch.argv[0]
    in_venv = (Path(found).parent.parent / "pyvenv.cfg").exists()
    program = os.path.abspath(found) if in_venv else os.path.realpath(found)
    env = dict(launch.environment)
    user_environment(user, env)
    made = plan(user, (Path(program), *needs.read_only), needs.writable, [state_root])
    argv = jailed((program, *launch.argv[1:]), made, env)
    return replace(launch, argv=tuple(argv), environment=env)
