"""What a node starts for a front process (activities/launches.py builds one per kind)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FrontJail:
    """What a front process needs when it runs jailed as the rank user (activities/front_jail.py): the paths it
    reads, those it writes (given to the rank user), and directories inside the latter it must not write (kept
    the agent's)."""

    read_only: tuple[Path, ...]
    writable: tuple[Path, ...]
    kept: tuple[Path, ...] = ()
    shared: tuple[Path, ...] = ()  # files of the agent's it reads (read_only too): given its group's read, not it


@dataclass(frozen=True)
class FrontLaunch:
    """What to start: argv (no secret), environment (may hold secrets), working directory; `jail`: set for a
    process a user's values influence (OpenCode, LiteLLM), started as the rank user when the agent can."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]
    working_directory: Path
    jail: FrontJail | None = None
