"""OpenCode's service as the rank user (activities/front_jail.py): its plan hides the state dir but for its own
home and workspace (writable) and its opencode.json (read-only); its config dir stays the agent's, so OpenCode never
forks the `npm install` that made it deaf to SIGTERM; a jailed process sees no key and writes only its own data."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from activities.front_jail import jailed_launch
from activities.front_launch import FrontLaunch
from activities.opencode_launch import _jail
from activities.rank_jail import PLAN_VARIABLE, RankUser, ensure_rank_user
from berth import opencode
from node.agent import rank_user

ROOT = os.geteuid() == 0
# Only root can hand files to another user; an agent that is not root jails nothing (FrontActivities._launch).
USER = RankUser("berth-rank", 999, 999) if ROOT else RankUser("me", os.getuid(), os.getgid())
CONFIG = {"$schema": "https://opencode.ai/config.json", **opencode.OFFLINE_CONFIG}


def served(state: Path, user: RankUser = USER, argv: tuple[str, ...] | None = None,
           env: dict[str, str] | None = None) -> tuple[opencode.ServeCommand, FrontLaunch]:
    """render_serve's command for a service of a state dir with keys, and its jailed launch."""
    (state / "keys").mkdir(parents=True, exist_ok=True)
    (state / "keys" / "replica.key").write_text("secret")
    state.chmod(0o700)
    command = opencode.render_serve(CONFIG, "pw", host="127.0.0.1", port=1, binary=Path("/bin/sh"),
                                    data_dir=state / "nodes" / "n1" / "services" / "wf.opencode" / "opencode",
                                    workspace=state / "volumes" / "ephemeral" / "wf" / "workspace")
    environment = {"PATH": os.environ["PATH"], **command.env, **(env or {})}
    launch = FrontLaunch(argv or command.argv, environment, command.cwd, _jail(command, environment))
    return command, jailed_launch(user, launch, state)


def test_the_plan_hides_the_state_dir_but_the_service_s_own_data(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_text("cert")
    command, launch = served(tmp_path / "state", env={"NODE_EXTRA_CA_CERTS": str(ca)})
    made = json.loads(launch.environment[PLAN_VARIABLE])
    assert str(tmp_path / "state") in made["hide"]
    assert made["writable"] == sorted([str(command.home), str(command.cwd)])
    assert {str(command.config_path), str(ca), os.path.realpath("/bin/sh")} <= set(made["read_only"])
    assert (made["uid"], made["gid"]) == (USER.uid, USER.gid)
    assert launch.argv[-5:] == ("serve", "--hostname", "127.0.0.1", "--port", "1")
    assert launch.argv[3] == os.path.realpath("/bin/sh")  # by its real path: a link on the way may be hidden
    # The environment stays the one the launch built (allow-listed), plus the plan the jail removes and the name of
    # the user it runs as (no passwd entry: activities/rank_identities.py).
    assert set(launch.environment) - {PLAN_VARIABLE} == {"PATH", "NODE_EXTRA_CA_CERTS", "USER", "LOGNAME", *command.env}
    assert launch.environment["USER"] == launch.environment["LOGNAME"] == USER.name


def test_the_service_owns_its_home_not_its_config_dir_nor_its_config(tmp_path: Path) -> None:
    command, _launch = served(tmp_path / "state")
    assert os.lstat(command.home).st_uid == USER.uid and os.lstat(command.cwd).st_uid == USER.uid
    kept = os.lstat(command.config_dir)
    assert (kept.st_uid, kept.st_mode & 0o777) == (os.getuid(), 0o755)
    config = os.lstat(command.config_path)
    assert (config.st_uid, config.st_mode & 0o777) == (os.getuid(), 0o444)
    # Not jailed (an agent that is not root): the config dir is read-only to the agent's own user too.
    plain = opencode.render_serve(CONFIG, "pw", host="127.0.0.1", port=1, binary=Path("/bin/sh"),
                                  data_dir=tmp_path / "plain")
    assert os.lstat(plain.config_dir).st_mode & 0o777 == 0o555
    again = opencode.render_serve({**CONFIG, "model": "b/m"}, "pw", host="127.0.0.1", port=1,
                                  binary=Path("/bin/sh"), data_dir=tmp_path / "plain")
    assert json.loads(again.config_path.read_text())["model"] == "b/m"  # a 0444 config is replaced on restart


def test_a_link_the_service_left_in_its_home_is_not_followed(tmp_path: Path) -> None:
    """A jailed OpenCode owns its home: it may leave `.config` a link to a directory of the agent's. The next start
    (as root) replaces the link and changes nothing where it pointed."""
    command, _launch = served(tmp_path / "state")
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "opencode").mkdir(parents=True)
    (elsewhere / "opencode").chmod(0o700)
    config_home = command.home / ".config"
    for child in config_home.iterdir():
        child.rmdir()
    config_home.rmdir()
    config_home.symlink_to(elsewhere)
    command, _launch = served(tmp_path / "state")
    assert not config_home.is_symlink() and command.config_dir.is_dir()
    assert os.lstat(elsewhere / "opencode").st_mode & 0o777 == 0o700


def test_a_jailed_service_sees_no_key_and_cannot_write_its_config(tmp_path: Path) -> None:
    if not ROOT:
        # Only root can change users: the agent then starts OpenCode as itself, as it does ranks.
        assert rank_user() is None
        return
    user = ensure_rank_user("berth-rank")
    state = tmp_path / "state"
    tmp_path.chmod(0o755)
    script = ('id -u; test -e "$KEYS" && echo keys; cat "$OPENCODE_CONFIG" >/dev/null && echo reads; '
              'test -w "$OPENCODE_CONFIG" || echo config-read-only; '
              'test -w "$HOME/.config/opencode" || echo dir-read-only; touch "$HOME/own" "$PWD/work" && echo writes')
    command, launch = served(state, user, ("/bin/sh", "-c", script), {"KEYS": str(state / "keys" / "replica.key")})
    done = subprocess.run(launch.argv, env=dict(launch.environment), cwd=launch.working_directory, timeout=60,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(user.uid), "reads", "config-read-only", "dir-read-only", "writes"]
    assert (command.home / "own").exists() and (command.cwd / "work").exists()
