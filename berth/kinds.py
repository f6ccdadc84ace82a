"""The registry of process kinds: every process Berth runs for a workflow, named once, with the facts the
rest of the house asks about it. Code asks `facts(kind).<fact>` instead of comparing kind strings.

The facts are plain data (the ground floor does no I/O); the parts that act on them are keyed by the same
kind in the room that owns the I/O: the launch in `activities/fronts.py` (`LAUNCHES`), the submission
checks in `server/kind_checks.py` (`CHECKS`). `tests/architecture/test_kinds.py` holds every room to the
registry: a kind added here without its launch fails CI.

Words: a **copy** is one placed instance of a model (its vLLM ranks); the **front** is the one process
in front of an endpoint (a pool's LiteLLM proxy, or what a service entry runs); a **service entry** is a
catalog entry that runs a front of its own (the gateway, OpenCode) instead of a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ProcessKind(StrEnum):
    """The JSON value of an endpoint's `service` field and of a front's `kind`."""

    VLLM = "vllm"  # a copy's engine: the endpoint routes straight to ready copies (Proxy=false)
    LITELLM = "litellm"  # a pool's LiteLLM proxy (Proxy=true)
    GATEWAY = "gateway"  # the LiteLLM Model Gateway service entry
    OPENCODE = "opencode"  # the OpenCode service entry (`opencode serve`)


@dataclass(frozen=True)
class Probe:
    """How a front is seen live: GET `path` answers 200 (or 401 where the front asks for a password)."""

    path: str = "/health/liveliness"
    unauthorized_is_live: bool = False


@dataclass(frozen=True)
class KindFacts:
    kind: ProcessKind
    front: bool  # runs as an endpoint's front process (FrontWorkflow), not as a copy's rank
    service_entry: bool  # a catalog entry may name it in its `service` block
    fronts_pool: bool  # stands in front of a replica pool: the endpoint is ready when it is up and a copy is
    openai_compatible: bool  # answers the OpenAI API (OpenCode answers its own)
    probe: Probe = Probe()
    key_parameter: str = ""  # the entry parameter naming the secret that holds its key
    generates_key: bool = False  # Berth generates its master key when the submission names none
    generates_password: bool = False  # Berth generates its server password when the submission names none


REGISTRY: dict[ProcessKind, KindFacts] = {k.kind: k for k in (
    KindFacts(ProcessKind.VLLM, front=False, service_entry=False, fronts_pool=False, openai_compatible=True,
              probe=Probe("/health")),
    KindFacts(ProcessKind.LITELLM, front=True, service_entry=False, fronts_pool=True, openai_compatible=True,
              key_parameter="ApiKeySecret", generates_key=True),
    KindFacts(ProcessKind.GATEWAY, front=True, service_entry=True, fronts_pool=False, openai_compatible=True,
              probe=Probe("/health"), key_parameter="MasterKeySecret", generates_key=True),
    KindFacts(ProcessKind.OPENCODE, front=True, service_entry=True, fronts_pool=False, openai_compatible=False,
              probe=Probe("/session", unauthorized_is_live=True), key_parameter="ApiKeySecret",
              generates_password=True),
)}

FRONTS: frozenset[ProcessKind] = frozenset(k for k, f in REGISTRY.items() if f.front)
SERVICE_ENTRIES: frozenset[ProcessKind] = frozenset(k for k, f in REGISTRY.items() if f.service_entry)


def facts(kind: str | ProcessKind | None) -> KindFacts:
    """The facts of `kind`; an endpoint row written before its kind was recorded is a plain pool (vLLM).
    Raises ValueError for a name the registry does not hold."""
    return REGISTRY[ProcessKind(kind or ProcessKind.VLLM)]
