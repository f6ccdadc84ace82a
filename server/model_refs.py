"""A submission's model, in the registry's terms: `Model=model://NAME` is looked up for the submitter and
rendered as its source (so an entry's own checks and memory facts still apply), then served from the model
cache by its model job (`definition.model_ref`, no weights job); an `hf://` model is registered on first use
and recorded as served by the workflow, its bytes still downloaded into the workflow's volume."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from berth.contracts import ModelRecord
from berth.errors import BerthError, UserInputError
from berth.security import Identity
from catalog.definition import WorkflowDefinition
from server.store.model_registry import ModelRegistry
from server.store.model_usage import ModelUsage

if TYPE_CHECKING:
    from server.context import ServerContext

log = logging.getLogger(__name__)
PREFIX = "model://"


def registered_model(context: ServerContext, values: dict[str, Any], who: Identity) -> tuple[dict[str, Any],
                                                                                              ModelRecord | None]:
    """The values to render (Model=model://NAME replaced by the model's source) and the model, if one."""
    ref = values.get("Model")
    if not (isinstance(ref, str) and ref.startswith(PREFIX)):
        return values, None
    model = ModelRegistry(context.store, context.settings.model_dirs).find(who, ref[len(PREFIX):])
    if values.get("Volume"):
        raise UserInputError(f"Volume is where hf:// weights are downloaded; {ref} is served from the model "
                             "cache, so leave Volume out.")
    if values.get("HfTokenSecret"):
        raise UserInputError(f"{ref} is fetched with the token its model names (berth model add "
                             "--hf-token-secret); leave HfTokenSecret out.")
    # A pre-staged model has no repository: the engine serves it under local/NAME.
    source = model.source if model.repo else f"hf://local/{model.name}"
    return {**values, "Model": source}, model


def served_from_registry(definition: WorkflowDefinition, model: ModelRecord | None) -> WorkflowDefinition:
    if model is None or definition.replica is None:
        return definition
    return definition.model_copy(update={"model_ref": f"{PREFIX}{model.name}", "weights": None})


def register_first_use(context: ServerContext, definition: WorkflowDefinition, who: Identity,
                       workflow_id: str) -> None:
    """An hf:// model's record (registered now if it is new) notes that this workflow serves it. The
    workflow starts either way: a name already taken by another source is only logged."""
    weights = definition.weights
    if weights is None:
        return
    ref = f"hf://{weights.repo}" + (f"@{weights.revision}" if weights.revision else "")
    try:
        ModelUsage(context.store, ModelRegistry(context.store, context.settings.model_dirs)).use(who, ref,
                                                                                                workflow_id)
    except BerthError as error:
        log.warning("workflow %s: %s not registered: %s", workflow_id, ref, error)
