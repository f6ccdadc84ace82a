"""The submission checks each process kind declares (berth/kinds.py holds the kinds' facts; the checks
read the store, so they live here): run on every submission whose endpoint that kind fronts."""

from __future__ import annotations

from collections.abc import Callable

from berth.kinds import ProcessKind
from catalog.definition import WorkflowDefinition
from server import opencode
from server.store.database import Store

# (store, definition, the endpoint proxy's public URL) → None, or a UserInputError saying what to change.
Check = Callable[[Store, WorkflowDefinition, str], None]

CHECKS: dict[ProcessKind, tuple[Check, ...]] = {
    ProcessKind.OPENCODE: (opencode.check_submission,),  # MaxContextSize and Model against the endpoint's
}


def check_kind(store: Store, definition: WorkflowDefinition, proxy_url: str) -> None:
    """Every check the definition's front kind declares. Blocking (reads the store): off the event loop."""
    kind = definition.front_kind
    for check in CHECKS.get(kind, ()) if kind is not None else ():
        check(store, definition, proxy_url)
