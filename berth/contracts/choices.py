"""The plain parts of the contracts that the CLI states in its help: the enums it offers as choices
(`--format`, `--scope`, `--strategy`) or as commands (`berth workflow rollout pause|…`) and the bounds of its
options (`audit list --limit`). A module that imports nothing, so that `berth --help` shows them without
importing pydantic and the models (issue 33); the models' modules re-export them."""

from __future__ import annotations

from enum import Enum, StrEnum

MAX_AUDIT_LIST = 1000  # rows per GET /v1/audit
MAX_EVENTS_PAGE = 1000  # events per GET /v1/events


class ModelFormat(StrEnum):
    SAFETENSORS = "safetensors"
    GGUF = "gguf"


class ModelScope(StrEnum):
    USER = "user"
    GROUP = "group"
    ORGANIZATION = "organization"


class RolloutKind(str, Enum):
    ROLLING = "rolling"  # one new copy at a time (max surge), an old one drained once it settled
    CANARY = "canary"  # a separate new set; traffic in steps, judged between steps
    BLUE_GREEN = "blue-green"  # the full new set, then all traffic at once; the old set kept a while


class RolloutAction(str, Enum):
    PAUSE = "pause"
    RESUME = "resume"
    PROMOTE = "promote"  # finish now: all traffic and the full size on the new revision
    ROLLBACK = "rollback"  # traffic back on the previous revision, the new set stopped
