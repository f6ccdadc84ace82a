"""A uid of its own for each user's ranks and each jailed service: what one user's code runs as never reaches another's.

Jailed processes (activities/rank_jail.py, rank/jail.py) all ran as the one rank user, so the code a user influences
— a model's remote code, engine flags, an OpenCode agent's bash tool — could read another user's engine environment
in /proc (its copy key), signal or trace it, and write the one engine cache every rank shared (compiled kernels the
next engine loads). Now the rank user is only who the jail is proven with; each user's ranks run as a uid of their
own, with an engine cache of their own, and each jailed service (OpenCode) as its workflow's own uid, from a block no
account uses, as systemd's DynamicUser gives each service one. The same uid and group number, no passwd entry (the
environment names the user: USER and LOGNAME, which getpass reads first), never reused: a uid once given keeps
meaning that user (or service) here.

Who gets which uid is kept in a small registry file in the state dir (or beside the control worker's), written whole
under an exclusive lock, so a restarted agent gives a re-placed copy the uid its files already belong to."""

from __future__ import annotations

import fcntl
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from activities.rank_jail import RankUser

# systemd's UID/GID assignment notes leave 0x70000000-0x7FFFFFFF unused (above the container ranges, below the
# sign bit some tools trip on); Berth takes the first 2^24 of it.
FIRST_UID = 0x70000000
UID_COUNT = 1 << 24
REGISTRY = "rank-uids.json"


class NoRankUid(RuntimeError):
    """Every uid of the block has been given (one line: what to do)."""


@dataclass
class RankIdentities:
    """`base`: the rank user the jail was proven with (activities/rank_jail.py usable_rank_user), whose name the
    per-workflow users carry; `directory`: where the registry lives (root's: a rank never reaches it)."""

    base: RankUser
    directory: Path
    first: int = FIRST_UID
    count: int = UID_COUNT

    def __post_init__(self) -> None:
        self._lock = threading.Lock()  # the agent's activities call from threads; the file lock covers processes
        self._known: dict[str, int] = {}

    def for_ranks(self, owner: str, workflow_id: str) -> RankUser:
        """Whom a copy's ranks run as: its owner's uid (one user's engines share their engine cache, as one host
        user's would), or its workflow's for a copy placed before copies named their owner."""
        return self._user(f"user:{owner}" if owner else f"workflow:{workflow_id}")

    def for_workflow(self, workflow_id: str) -> RankUser:
        """Whom a jailed service (OpenCode) runs as: a uid of its workflow's own, so not even its owner's coding
        agent reads the owner's engines' copy keys in /proc (a copy answers only Berth)."""
        return self._user(f"workflow:{workflow_id}")

    def _user(self, key: str) -> RankUser:
        """Blocking file work the first time: from a thread."""
        uid = self._known.get(key)
        if uid is None:
            with self._lock:
                uid = self._given(key)
                self._known[key] = uid
        return RankUser(f"{self.base.name}-{uid - self.first}", uid, uid)

    def _given(self, key: str) -> int:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / REGISTRY
        with open(self.directory / (REGISTRY + ".lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            given = _read(path)
            uid = given.get(key)
            if uid is not None:
                return uid
            uid = self.first + len(given)
            if uid >= self.first + self.count:
                raise NoRankUid(f"all {self.count} rank uids from {self.first} are given (in {path}); "
                                "remove the entries of users and workflows that are gone for good")
            given[key] = uid
            temporary = path.with_suffix(".tmp")
            temporary.write_text(json.dumps(given))
            temporary.chmod(0o600)
            os.replace(temporary, path)
            return uid


def _read(path: Path) -> dict[str, int]:
    try:
        given = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        raise NoRankUid(f"the rank uid registry {path} cannot be read ({error}); it must be restored, not "
                        "removed: its uids own files on this node") from None
    if not isinstance(given, dict) or not all(isinstance(v, int) for v in given.values()):
        raise NoRankUid(f"the rank uid registry {path} is not a map of users and workflows to uids; restore it")
    return given


def user_environment(user: RankUser, env: dict[str, str]) -> None:
    """Name `user` where programs look for a user without a passwd entry (getpass reads LOGNAME, USER first)."""
    env["USER"] = env["LOGNAME"] = user.name
