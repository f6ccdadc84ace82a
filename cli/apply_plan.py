"""`berth apply`/`berth diff`'s plan, with no I/O: the file's documents validated, and for each what applying
it would do to the workflow of its name (create it, roll it to the changed values, or nothing)."""

from __future__ import annotations

from enum import Enum
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from berth.bounded_parse import load_yaml_all
from berth.contracts import RolloutStrategy, WorkflowDescription, WorkflowRevision
from berth.errors import UserInputError

MAX_FILE_BYTES = 1 << 20  # a desired-state file is a few documents of values, never this large
MAX_DOCUMENTS = 50
# The same grammar the API holds a chosen workflow name to (server/submission.py), checked here too so that a
# bad name is refused before anything of the file is applied.
NAME_PATTERN = r"^[a-z][a-z0-9-]{1,62}$"


class StrategyDocument(RolloutStrategy):
    """A document's `strategy`: RolloutStrategy's fields, none other (a misspelt one is refused, not ignored)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ApplyDocument(BaseModel):
    """One YAML document of an apply file: the workflow NAME serving ENTRY with these values."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN)
    entry: str = Field(min_length=1)
    values: dict[str, Any] = {}
    scope: str | None = None  # the Scope catalog value, given beside the values for readability
    strategy: StrategyDocument | None = None

    def desired_values(self) -> dict[str, Any]:
        return {**self.values, "Scope": self.scope} if self.scope is not None else dict(self.values)

    def rollout_strategy(self) -> RolloutStrategy:
        return RolloutStrategy.model_validate(self.strategy.model_dump()) if self.strategy else RolloutStrategy()


class Action(str, Enum):
    CREATE = "create"  # no workflow of that name: start one
    UPDATE = "update"  # running with other values: a new revision, rolled to
    UNCHANGED = "unchanged"  # running with these values: nothing to do


class Change(BaseModel):
    model_config = ConfigDict(frozen=True)

    key: str
    old: str | None  # None: the serving revision has no such value
    new: str


class Step(BaseModel):
    """What applying one document does; `-o json` prints these."""

    model_config = ConfigDict(frozen=True)

    document: int  # 1-based, in file order
    name: str
    entry: str
    action: Action
    revision: int | None = None  # the serving revision (None when absent)
    changes: list[Change] = []

    def changed_values(self, document: ApplyDocument) -> dict[str, Any]:
        desired = document.desired_values()
        return {change.key: desired[change.key] for change in self.changes}


def parse_documents(text: str) -> list[ApplyDocument]:
    """The file's documents, each validated; a bad one refused in one line naming its index and field."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise UserInputError(f"the file is larger than {MAX_FILE_BYTES // 1024} KiB")
    try:
        raw = [d for d in load_yaml_all(text, "the file") if d is not None]
    except yaml.YAMLError as error:
        raise UserInputError(f"the file is not YAML: {' '.join(str(error).split())}") from None
    if not raw:
        raise UserInputError("the file holds no documents")
    if len(raw) > MAX_DOCUMENTS:
        raise UserInputError(f"the file holds {len(raw)} documents; at most {MAX_DOCUMENTS}")
    documents = [_document(index, item) for index, item in enumerate(raw, start=1)]
    names = [d.name for d in documents]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise UserInputError(f"each workflow name once per file; repeated: {', '.join(repeated)}")
    return documents


def _document(index: int, raw: Any) -> ApplyDocument:
    if not isinstance(raw, dict):
        raise UserInputError(f"document {index}: a mapping of name, entry, values, scope, strategy")
    try:
        return ApplyDocument.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"]) or "(document)"
        raise UserInputError(f"document {index}: {field}: {first['msg']}") from None


def rendered(value: Any) -> str:
    """A value as the catalog reads it, so that 4096 and "4096" (or true and "true") are one value."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def serving(revisions: list[WorkflowRevision]) -> WorkflowRevision | None:
    """The revision traffic is on: the one marked serving, else the newest."""
    marked = [r for r in revisions if r.state == "serving"]
    chosen = marked or revisions
    return max(chosen, key=lambda r: r.revision) if chosen else None


def changes(current: dict[str, Any], desired: dict[str, Any]) -> list[Change]:
    """The desired values that differ from the current ones; a value the document leaves out is kept."""
    found = []
    for key, value in desired.items():
        old = rendered(current[key]) if key in current else None
        if old != rendered(value):
            found.append(Change(key=key, old=old, new=rendered(value)))
    return found


def plan_step(index: int, document: ApplyDocument, workflow: WorkflowDescription | None,
              revisions: list[WorkflowRevision]) -> Step:
    """What applying `document` does, given the workflow of its name (None: absent) and its revisions."""
    if workflow is None:
        return Step(document=index, name=document.name, entry=document.entry, action=Action.CREATE)
    if workflow.status != "running":
        raise UserInputError(f"document {index}: workflow {document.name} is {workflow.status or 'not running'} "
                             "(it ended); give the document another name")
    if workflow.entry != document.entry:
        raise UserInputError(f"document {index}: workflow {document.name} serves {workflow.entry}, not "
                             f"{document.entry}; an entry cannot change by a revision")
    current = serving(revisions)
    if current is None:
        raise UserInputError(f"document {index}: workflow {document.name} has no revisions to compare with")
    found = changes(current.values, document.desired_values())
    return Step(document=index, name=document.name, entry=document.entry,
                action=Action.UPDATE if found else Action.UNCHANGED, revision=current.revision, changes=found)


def plan_line(step: Step) -> str:
    """One line of `berth diff`: `+ create`, `~ update K: old → new`, `= unchanged`."""
    if step.action is Action.CREATE:
        return f"+ create {step.name} ({step.entry})"
    if step.action is Action.UNCHANGED:
        return f"= unchanged {step.name} (revision {step.revision})"
    return f"~ update {step.name} (revision {step.revision}): {describe_changes(step.changes)}"


def describe_changes(found: list[Change]) -> str:
    return ", ".join(f"{c.key}: {'(unset)' if c.old is None else c.old} → {c.new}" for c in found)
