"""What a node starts for a front process (activities/launches.py builds one per kind)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FrontLaunch:
    """What to start: argv (no secret), environment (may hold secrets), working directory."""

    argv: tuple[str, ...]
    environment: Mapping[str, str]
    working_directory: Path
