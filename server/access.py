"""Who may read what of a workflow: describing it follows the workflow's own scope; its engine logs follow
the scope within the owner's organization; what can hold secrets (service logs such as OpenCode's
`show-server` password, the definition) only its owner and administrators. One rule, used by every route."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from berth import scopes
from berth.errors import NotFoundError, PermissionDeniedError
from berth.security import Identity
from server.store.database import Store
from server.store.tables import EndpointRow, WorkflowRow

# The jobs whose logs a scope member may read: an engine rank's (vLLM prints no request content by
# default). Everything else — LiteLLM, gateway and OpenCode services, `show-server` — is the owner's:
# configs, passwords and other users' requests pass through those. New jobs are owner-only by default.
SCOPE_READABLE_JOB = re.compile(r"^vllm-rank-\d+$")
# Where a copy's or service's error carries the last lines of its log (workflows/copy.py, service.py).
LOG_TAIL_MARK = "; last lines of its log:"
HIDDEN_ALLOCATION = "(another user)"


def in_scope(endpoint: EndpointRow, who: Identity) -> bool:
    """Whether `who` is inside an endpoint's scope (the workflow's own scope): user, group, org, public."""
    return scopes.in_scope(endpoint.scope, endpoint.owner, endpoint.org, endpoint.groups, who)


def _no_such_workflow(workflow_id: str) -> NotFoundError:
    shown = workflow_id if len(workflow_id) <= 128 else workflow_id[:128] + "…"
    return NotFoundError(f"No workflow with ID '{shown}'. Run `berth workflow list` to see your workflows.")


@dataclass(frozen=True)
class WorkflowAccess:
    """A workflow `who` may describe, and what more of it they may read."""

    row: WorkflowRow
    who: Identity
    endpoint: EndpointRow | None

    @property
    def owner_view(self) -> bool:
        return self.who.admin or self.who.user == self.row.owner

    def may_read_job(self, job: str) -> bool:
        # `public` opens the endpoint to everyone, not the logs: those stay inside the organization.
        return self.owner_view or (bool(SCOPE_READABLE_JOB.match(job)) and self.who.org == self.row.org)

    def require_job(self, job: str) -> None:
        if not self.may_read_job(job):
            shown = job if len(job) <= 64 else job[:64] + "…"
            raise PermissionDeniedError(
                f"Only the owner of {self.row.id} ({self.row.owner}) or an administrator may read its '{shown}' "
                "log: it can hold secrets.")

    def require_owner(self, what: str) -> None:
        if not self.owner_view:
            raise PermissionDeniedError(
                f"Only the owner of {self.row.id} ({self.row.owner}) or an administrator may {what}.")

    def redact(self, text: str | None) -> str | None:
        """A status line as this reader may see it: log lines quoted in an error are the owner's."""
        if not text or self.owner_view:
            return text
        head, mark, _tail = text.partition(LOG_TAIL_MARK)
        return head + ("; its log lines are shown to its owner only" if mark else "")

    def redact_status(self, result: dict[str, Any]) -> dict[str, Any]:
        if self.owner_view:
            return result
        result["last_error"] = self.redact(result.get("last_error"))
        for event in result.get("events") or []:
            event["message"] = self.redact(event.get("message"))
        # Both names of the copies (`replicas` until this release): the answer carries the two.
        for copy in [*(result.get("copies") or []), *(result.get("replicas") or [])]:
            copy["detail"] = self.redact(copy.get("detail"))
        return result


def workflow_access(store: Store, workflow_id: str, who: Identity) -> WorkflowAccess:
    """The workflow if `who` may describe it; outside its scope it does not exist for them (404). A
    workflow whose endpoint is gone (stopped) falls back to owner and administrators only."""
    try:
        row = store.workflow(workflow_id)
    except NotFoundError:
        raise _no_such_workflow(workflow_id) from None
    try:
        endpoint: EndpointRow | None = store.endpoint(row.endpoint_id)
    except NotFoundError:
        endpoint = None
    access = WorkflowAccess(row=row, who=who, endpoint=endpoint)
    if access.owner_view or (endpoint is not None and in_scope(endpoint, who)):
        return access
    raise _no_such_workflow(workflow_id)


def allocation_labels(store: Store, who: Identity) -> Callable[[str | None], str | None]:
    """How `node list` names the copy holding a GPU: administrators see every copy; a user sees their
    own copies and only that a GPU is busy otherwise (capacity, not other users' workflow IDs)."""
    if who.admin:
        return lambda copy_id: copy_id
    mine = {w.id for w in store.workflows(who.user)}
    own = {r.copy_id for r in store.placements.reservations() if r.workflow_id in mine}
    return lambda copy_id: copy_id if copy_id is None or copy_id in own else HIDDEN_ALLOCATION
