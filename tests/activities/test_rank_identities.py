"""Each user's ranks and each jailed service run as a uid of their own (activities/rank_identities.py): given once
and kept in a registry a restarted agent reads back; a jailed process of another user (or an OpenCode service) can
neither read an engine's process environment (its copy key) nor signal it, which one shared rank user allowed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from activities.rank_identities import FIRST_UID, REGISTRY, NoRankUid, RankIdentities
from activities.rank_jail import RankUser, engine_paths, ensure_rank_user, jailed, plan
from node.agent import rank_user

pytestmark = pytest.mark.timeout(60)
ROOT = os.geteuid() == 0
BASE = RankUser("berth-rank", 999, 999)


def test_each_user_and_each_service_gets_its_own_uid_kept_across_restarts(tmp_path: Path) -> None:
    users = RankIdentities(BASE, tmp_path)
    alice, bob = users.for_ranks("alice", "wf-a"), users.for_ranks("bob", "wf-b")
    assert (alice.uid, alice.gid, alice.name) == (FIRST_UID, FIRST_UID, "berth-rank-0")
    assert bob.uid == FIRST_UID + 1
    assert users.for_ranks("alice", "wf-other") == alice  # one user's engines share a uid (and an engine cache)
    service = users.for_workflow("wf-a")  # alice's OpenCode: not her engines' uid (it must not read their keys)
    assert service.uid == FIRST_UID + 2
    assert users.for_ranks("", "wf-a") == service  # a copy placed before copies named their owner: its workflow's
    # A restarted agent reads the registry back: a re-placed copy's files are already its uid's.
    again = RankIdentities(BASE, tmp_path)
    assert again.for_ranks("bob", "wf-b") == bob and again.for_ranks("carol", "wf-c").uid == FIRST_UID + 3
    assert os.stat(tmp_path / REGISTRY).st_mode & 0o777 == 0o600


def test_a_full_block_and_a_damaged_registry_are_refused_in_one_line(tmp_path: Path) -> None:
    users = RankIdentities(BASE, tmp_path, count=1)
    users.for_workflow("wf-a")
    with pytest.raises(NoRankUid, match=r"^all 1 rank uids from \d+ are given"):
        users.for_workflow("wf-b")
    (tmp_path / REGISTRY).write_text("[1, 2]")
    with pytest.raises(NoRankUid, match="is not a map of users and workflows to uids; restore it$"):
        RankIdentities(BASE, tmp_path).for_workflow("wf-c")


def _jailed(code: str, user: RankUser, run: Path, env: dict[str, str]) -> list[str]:
    env.update({"PATH": os.environ["PATH"], "PYTHONPATH": ""})
    os.chown(run, user.uid, user.gid)
    return jailed([sys.executable, "-P", "-c", code], plan(user, engine_paths([sys.executable], env), [run], []), env)


def test_one_workflows_process_cannot_read_or_signal_anothers(tmp_path: Path) -> None:
    if not ROOT:
        assert rank_user() is None  # not root: everything runs as the agent (the documented fallback)
        return
    users = RankIdentities(ensure_rank_user("berth-rank"), tmp_path / "registry")
    tmp_path.chmod(0o755)
    runs = {name: tmp_path / name for name in ("victim", "other", "same")}
    for run in runs.values():
        run.mkdir()
    victim_env = {"COPY_KEY": "sk-secret"}
    victim = subprocess.Popen(_jailed("import sys; sys.stdin.read()", users.for_ranks("victim", "wf-victim"),
                                      runs["victim"], victim_env),
                              env=victim_env, cwd=runs["victim"], stdin=subprocess.PIPE, text=True)
    probe = (f"import os\ntry:\n    print(b'sk-secret' in open('/proc/{victim.pid}/environ', 'rb').read())\n"
             f"except PermissionError:\n    print('environ-refused')\ntry:\n    os.kill({victim.pid}, 0)\n"
             "    print('signals')\nexcept PermissionError:\n    print('signal-refused')\n")
    try:
        def attack(user: RankUser, run: Path) -> list[str]:
            env: dict[str, str] = {}
            done = subprocess.run(_jailed(probe, user, run, env), env=env, cwd=run, capture_output=True, text=True,
                                  timeout=30)
            assert done.returncode == 0, done.stderr
            return done.stdout.split()

        # Another user's engine, and the victim's own OpenCode service (its workflow's uid), are both kept out.
        assert attack(users.for_ranks("other", "wf-other"), runs["other"]) == ["environ-refused", "signal-refused"]
        assert attack(users.for_workflow("wf-victim-opencode"), runs["other"]) == ["environ-refused", "signal-refused"]
        # The same probe as the victim's own uid reads it: the uids are what keep users apart.
        assert attack(users.for_ranks("victim", "wf-victim-2"), runs["same"]) == ["True", "signals"]
    finally:
        victim.kill()
        victim.wait(timeout=30)
