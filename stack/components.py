"""What `berth up` starts, and how: its options, the record of one child component (for restarts and
stack.json), and the command line and environment a component gets."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from berth.child_environment import BASE_VARIABLES, inherit
from berth.processes import berth_python, without_relative_python_path
from berth.restarts import RestartRecord
from berth.tls import TLSFiles


@dataclass
class StackOptions:
    state_dir: Path
    port_base: int
    nodes: int = 1
    simulate_gpus: str | None = None
    engine: str | None = None
    hf_mirror: Path | None = None
    write_user_config: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)
    tls: bool = False  # the API and the endpoint proxy serve https (a private CA unless tls_files is given)
    tls_files: TLSFiles | None = None  # the operator's certificate, key and CA (implies tls)
    tls_names: tuple[str, ...] = ()  # more names/addresses for the private CA's server certificate

    @property
    def scheme(self) -> str:
        return "https" if self.tls or self.tls_files else "http"


@dataclass
class Child:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    argv: list[str]
    env: dict[str, str]
    record: RestartRecord
    exit_reported: bool = False  # with restarts off: its exit was said once
    pass_fds: tuple[int, ...] = ()  # descriptors it inherits again at each restart (the proxy's socket)

    def status(self) -> dict[str, Any]:
        return {"name": self.name, "pid": self.process.pid, **self.record.summary()}


def cli_argv() -> list[str]:
    """How the supervisor runs a Berth component: `berth <command>` in this interpreter."""
    return berth_python("cli")


def component_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` without relative PYTHONPATH entries: the components run in the state dir, not the caller's."""
    cleaned, dropped = without_relative_python_path(env)
    if dropped:
        print(f"berth: the components ignore PYTHONPATH entries that are not absolute paths: {dropped}",
              file=sys.stderr, flush=True)
    return cleaned


def temporal_environment() -> dict[str, str]:
    """The Temporal dev server needs none of Berth's settings: above all not the admin token, which
    anything that can read its /proc environ (or a crash dump) would then hold."""
    return inherit(os.environ, BASE_VARIABLES, prefixes=("TEMPORAL_",))
