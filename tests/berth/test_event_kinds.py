"""The event kinds' closed registry (berth.contracts.EventKind) and what states it elsewhere: docs/events.md names
every kind, the API's `kind` pattern takes every kind and family and nothing else."""

from __future__ import annotations

import re
from pathlib import Path

from berth.contracts.events import EVENT_KINDS_PATTERN, EventKind

DOCS = Path(__file__).resolve().parents[2] / "docs" / "events.md"


def test_every_kind_is_documented() -> None:
    text = DOCS.read_text()
    assert [kind.value for kind in EventKind if f"`{kind.value}`" not in text] == []


def test_every_kind_is_a_dotted_name_and_the_pattern_takes_exactly_the_known_names() -> None:
    assert all(re.fullmatch(r"[a-z]+\.[a-z]+", kind.value) for kind in EventKind)
    families = {kind.value.split(".")[0] for kind in EventKind}
    for name in [kind.value for kind in EventKind] + sorted(families):
        assert re.match(EVENT_KINDS_PATTERN, name), name
    assert re.match(EVENT_KINDS_PATTERN, "copy.ready, node ,workflow.started")
    for wrong in ("copy.", "copies", "copy.readyx", "node,,copy", "", ",copy"):
        assert not re.match(EVENT_KINDS_PATTERN, wrong), wrong
