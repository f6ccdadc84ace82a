"""`berth apply`'s plan, pure: an absent workflow is created, equal values change nothing (whatever their
YAML form), changed or new values update only those keys, documents plan in order, and a bad file is
refused in one line naming the document and the field."""

from __future__ import annotations

import pytest

from berth.contracts import WorkflowDescription, WorkflowEndpoint, WorkflowRevision
from berth.errors import UserInputError
from cli.apply_plan import Action, parse_documents, plan_line, plan_step, serving

ENTRY = "SmolLM2 135M Instruct"
FILE = f"""
name: smol
entry: {ENTRY}
scope: group
values: {{MaxContextSize: 4096, GpusPerNode: 0}}
strategy: {{kind: rolling, max_surge: 2}}
---
name: smol-two
entry: {ENTRY}
values: {{MaxContextSize: "2048"}}
"""


def _running(name: str, status: str = "running") -> WorkflowDescription:
    return WorkflowDescription(id=name, entry=ENTRY, owner="alice", created_at=0.0, status=status,
                               endpoint=WorkflowEndpoint(id="ep-1", url="http://x/ep-1"))


def _revision(number: int, values: dict[str, object], state: str = "") -> WorkflowRevision:
    return WorkflowRevision(workflow_id="smol", revision=number, entry=ENTRY, values=values, by="alice", at=0.0,
                            state=state)


def test_documents_parse_in_order_with_scope_and_strategy() -> None:
    first, second = parse_documents(FILE)
    assert (first.name, second.name) == ("smol", "smol-two")
    assert first.desired_values() == {"MaxContextSize": 4096, "GpusPerNode": 0, "Scope": "group"}
    assert first.rollout_strategy().max_surge == 2
    assert second.rollout_strategy().max_surge == 1  # the default strategy


def test_absent_is_created() -> None:
    step = plan_step(1, parse_documents(FILE)[0], None, [])
    assert step.action is Action.CREATE and plan_line(step) == f"+ create smol ({ENTRY})"


def test_equal_values_in_another_form_are_unchanged() -> None:
    document = parse_documents(FILE)[0]
    revisions = [_revision(1, {"MaxContextSize": "4096", "GpusPerNode": "0", "Scope": "group", "Other": "x"})]
    step = plan_step(1, document, _running("smol"), revisions)
    assert step.action is Action.UNCHANGED and step.changes == []
    assert plan_line(step) == "= unchanged smol (revision 1)"


def test_changed_and_new_values_are_the_update() -> None:
    document = parse_documents(FILE)[0]
    revisions = [_revision(1, {"MaxContextSize": 2048}, "replaced"), _revision(2, {"MaxContextSize": 8192}),
                 _revision(3, {"MaxContextSize": 4096, "GpusPerNode": 0}, "serving")]
    assert serving(revisions).revision == 3  # type: ignore[union-attr]
    step = plan_step(1, document, _running("smol"), revisions)
    assert step.action is Action.UPDATE and step.revision == 3
    assert step.changed_values(document) == {"Scope": "group"}
    assert plan_line(step) == "~ update smol (revision 3): Scope: (unset) → group"
    step = plan_step(1, document, _running("smol"), [_revision(1, {"MaxContextSize": 2048, "GpusPerNode": 0,
                                                                   "Scope": "group"})])
    assert step.changed_values(document) == {"MaxContextSize": 4096}
    assert plan_line(step) == "~ update smol (revision 1): MaxContextSize: 2048 → 4096"


def test_without_a_serving_mark_the_newest_revision_counts() -> None:
    assert serving([_revision(1, {}), _revision(2, {})]).revision == 2  # type: ignore[union-attr]
    assert serving([]) is None


def test_an_ended_workflow_or_another_entry_is_refused() -> None:
    document = parse_documents(FILE)[0]
    with pytest.raises(UserInputError, match="document 1: workflow smol is completed"):
        plan_step(1, document, _running("smol", "completed"), [])
    other = _running("smol").model_copy(update={"entry": "GPT-OSS 20B"})
    with pytest.raises(UserInputError, match="serves GPT-OSS 20B"):
        plan_step(1, document, other, [_revision(1, {})])


@pytest.mark.parametrize(("text", "message"), [
    ("name: smol\nentry: x\nvalue: {}\n", "document 1: value: Extra inputs are not permitted"),
    ("name: smol\nentry: x\n---\nname: Bad_Name\nentry: x\n", "document 2: name: String should match"),
    ("name: smol\nentry: x\nstrategy: {kind: rolling, surge: 2}\n", "document 1: strategy.surge: Extra inputs"),
    ("name: smol\nentry: x\nstrategy: {max_surge: 0}\n", "document 1: strategy.max_surge: Input should be"),
    ("name: smol\n", "document 1: entry: Field required"),
    ("- a\n- b\n", "document 1: a mapping"),
    ("name: smol\nentry: x\n---\nname: smol\nentry: y\n", "repeated: smol"),
    ("", "no documents"),
    ("name: [\n", "not YAML"),
    ("---\nname: a1\nentry: x\n" * 51, "at most 50"),
    ("name: smol\nentry: x\nvalues: {A: '" + "x" * (1 << 20) + "'}\n", "larger than 1024 KiB"),
])
def test_a_bad_file_is_refused_in_one_line(text: str, message: str) -> None:
    with pytest.raises(UserInputError) as refused:
        parse_documents(text)
    assert message in str(refused.value) and "\n" not in str(refused.value)
