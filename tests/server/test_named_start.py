"""A start with a chosen name (issue 17, `berth apply`): the name is the workflow's ID, held to one grammar,
and a name any workflow already has is refused with a conflict that names no owner."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from berth.errors import ConflictError
from berth.security import Identity
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.app import build_context
from server.submission import StartRequest, new_rows, refuse_taken_name

ENTRY = "SmolLM2 135M Instruct"
ALICE = Identity(user="alice", groups=("default",), org="default")


@pytest.mark.parametrize("name", ["a", "1abc", "Upper", "with_underscore", "a" * 64, "dot.ted", "-lead", ""])
def test_a_name_outside_the_grammar_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValidationError) as refused:
        StartRequest(entry=ENTRY, name=name)
    message = refused.value.errors()[0]["msg"]
    assert "a-z, 0-9 and '-'" in message and "\n" not in message


def test_a_named_start_is_the_workflow_id_and_a_taken_name_is_a_conflict(tmp_path: Path) -> None:
    context = build_context(tmp_path / "state", "127.0.0.1:1")
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, {}))
    row, endpoint = new_rows(entry, definition, ALICE, StartRequest(entry=ENTRY, name="my-smol").name)
    assert row.id == endpoint.workflow_id == "my-smol"
    assert new_rows(entry, definition, ALICE)[0].id.startswith(f"{entry.slug}-")  # unnamed: slug and suffix
    refuse_taken_name(context, "my-smol")  # free until the row exists
    context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
    with pytest.raises(ConflictError) as refused:
        refuse_taken_name(context, "my-smol")
    assert str(refused.value) == ("a workflow named my-smol exists; choose another name "
                                  "(or `berth apply` to roll it)")
    assert ConflictError.http_status == 409


def test_two_starts_of_one_name_at_once_conflict_at_the_store(tmp_path: Path) -> None:
    """The submission's check and the row's insert are apart: the insert refuses the second too."""
    context = build_context(tmp_path / "state", "127.0.0.1:1")
    entry = find_entry(ENTRY)
    definition = render(entry, resolve_values(entry, {}))
    for attempt in range(2):
        row, endpoint = new_rows(entry, definition, ALICE, "my-smol")
        if attempt == 0:
            context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
            continue
        with pytest.raises(ConflictError, match="a workflow named my-smol exists"):
            context.store.add_workflow(row, definition.model_dump(mode="json"), endpoint)
