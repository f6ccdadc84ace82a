"""A workflow's next revision (issue 17): its values merged over the serving revision's, checked and
rendered exactly like a start, what Berth generated at start carried over so the endpoint's key does not
change, and the changes a rollout cannot make refused, each with what to do instead."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from berth.contracts import RolloutKind, WorkflowUpdateRequest
from berth.errors import UserInputError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from server.policy_rules import Subject
from server.store.tables import WorkflowRow
from server.submission import StartRequest, prepare, with_generated_keys

if TYPE_CHECKING:
    from server.context import ServerContext


class NothingToChange(Exception):
    """The new values render the serving revision's definition: no revision is written."""

    def __init__(self, revision: int) -> None:
        super().__init__(f"nothing to change: the values equal revision {revision}'s")
        self.revision = revision


def prepare_update(context: ServerContext, row: WorkflowRow, body: WorkflowUpdateRequest, who: Identity,
                   serving_revision: int | None = None) -> tuple[int, WorkflowDefinition, dict[str, Any]]:
    """(the next revision's number, its definition, its merged values): the values of the revision that
    serves (`serving_revision`, the pool's answer; the latest when unknown) with the update's over them — a
    rolled-back revision's values never come back (issue 31). Raises NothingToChange when the values change
    nothing, UserInputError for a change no rollout can make. Reads the store: off the loop."""
    latest = context.store.revisions.latest(row)
    base = (context.store.revisions.revision(row, serving_revision) if serving_revision else None) or latest
    serving = WorkflowDefinition.model_validate(base.definition)
    if serving.replica is None:
        raise UserInputError(f"Workflow '{row.id}' is a service: only replica pools roll to a new revision; "
                             "stop and start a service.")
    merged = {**base.values, **body.values}
    endpoint = context.store.endpoint(row.endpoint_id)
    owner = Subject(user=row.owner, org=row.org, groups=tuple(endpoint.groups or ()))
    _entry, definition = prepare(context, StartRequest(entry=row.entry, values=merged), who, owner)
    definition = with_generated_keys(_carried_over(serving, definition))
    refuse_unrollable(row.id, serving, definition, body)
    if definition.model_dump(mode="json") == serving.model_dump(mode="json"):
        raise NothingToChange(base.revision)
    return latest.revision + 1, definition, merged


def _carried_over(serving: WorkflowDefinition, definition: WorkflowDefinition) -> WorkflowDefinition:
    """The new definition with the serving one's generated key and password where the new values give
    none: the values merged over the serving ones would still give a key they gave, so a missing one was
    generated at start, and generating another would change the endpoint's key under its clients."""
    if serving.api_key and not (definition.api_key or definition.api_key_secret):
        definition = definition.model_copy(update={"api_key": serving.api_key})
    if serving.service is not None and definition.service is not None \
            and serving.service.options.get("password") and not definition.service.options.get("password"):
        service = definition.service.model_copy(
            update={"options": {**definition.service.options, "password": serving.service.options["password"]}})
        definition = definition.model_copy(update={"service": service})
    return definition


def refuse_unrollable(workflow_id: str, serving: WorkflowDefinition, definition: WorkflowDefinition,
                      body: WorkflowUpdateRequest) -> None:
    """One clear line for each change that a rollout of the same endpoint cannot make."""
    restart = f"stop {workflow_id} and start a new workflow"
    if definition.replica is None:
        raise UserInputError("only replica pools roll to a new revision; stop and start a service.")
    if definition.proxy != serving.proxy:
        raise UserInputError(f"Proxy cannot change in a rollout (it is {serving.proxy}): it decides what fronts "
                             f"the endpoint; {restart}.")
    if definition.endpoint.scope != serving.endpoint.scope:
        raise UserInputError(f"the endpoint's Scope cannot change in a rollout (it is "
                             f"{serving.endpoint.scope.value}): who may call it would change under its clients; "
                             f"{restart}.")
    if definition.model_ref != serving.model_ref:
        raise UserInputError(f"Model cannot change in a rollout (it is {serving.model_ref or 'unset'}): the "
                             f"endpoint serves one model; {restart}.")
    if body.strategy.kind is RolloutKind.CANARY and serving.proxy:
        raise UserInputError("canary traffic steps are enforced by the endpoint proxy; this pool routes through "
                             "its LiteLLM proxy (Proxy=true): use --strategy rolling or blue-green.")
