"""`berth workflow list` without Typer, Rich, pydantic or httpx (issue 33), and what both of its paths share:
the columns and the rows the table shows (cli/workflow.py's command prints through them too).

The API's answer is read by hand when every row is plainly a WorkflowSummary (each field there, of its type);
for any other answer the contract itself reads it (pydantic, imported then), so that a doubtful answer gets
the normal path's rows or its error, word for word."""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from berth.client_config import client_config_values
from berth.errors import BerthError
from cli.fast.api_get import get, target
from cli.output import Format, print_error, table, write_json

COLUMNS = [("id", "WORKFLOW ID"), ("entry", "ENTRY"), ("phase", "PHASE"), ("owner", "OWNER"),
           ("created", "CREATED"), ("endpoint_id", "ENDPOINT")]
# berth.contracts.workflows.WorkflowSummary's fields, in its order (`-o json` prints them so), and their types.
SUMMARY_FIELDS = ("id", "entry", "owner", "created_at", "status", "phase", "endpoint_id")
_NUMBERS = ("created_at",)


def table_row(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A summary as the table shows it (its wire form, with the creation time in local time)."""
    return {**summary, "created": datetime.fromtimestamp(summary["created_at"]).strftime("%Y-%m-%d %H:%M")}


def run(options: Mapping[str, str]) -> int | None:
    """Print the workflows: 0, or 1 after the error line; None to leave the command to Typer."""
    try:
        api = target(client_config_values())
    except (OSError, ValueError, TypeError):
        return None  # a config file the normal path refuses in its own words
    if api is None:
        return None
    try:
        summaries = _summaries(get(api, "/v1/workflows"))
    except BerthError as error:
        print_error(str(error))
        return 1
    if options["--output"] == Format.JSON.value:
        write_json(summaries)
    else:
        table([table_row(summary) for summary in summaries], COLUMNS)
    return 0


def _summaries(data: Any) -> list[dict[str, Any]]:
    """The answer's rows as `wire(many(WorkflowSummary, data))` gives them."""
    rows = [_summary(row) for row in data] if isinstance(data, list) else [None]
    if all(row is not None for row in rows):
        return rows  # type: ignore[return-value]
    from berth.api_transport import many
    from berth.contracts.base import wire
    from berth.contracts.workflows import WorkflowSummary

    result: list[dict[str, Any]] = wire(many(WorkflowSummary, data))
    return result


def _summary(row: Any) -> dict[str, Any] | None:
    """One row as its model would dump it, or None when the model must judge it."""
    if not isinstance(row, dict) or not all(name in row for name in SUMMARY_FIELDS):
        return None
    summary: dict[str, Any] = {}
    for name in SUMMARY_FIELDS:
        value = row[name]
        if name in _NUMBERS:
            if isinstance(value, bool) or not isinstance(value, int | float):
                return None
            try:
                value = float(value)
            except OverflowError:
                return None
            if not math.isfinite(value):
                return None
        elif not isinstance(value, str):
            return None
        summary[name] = value
    return summary
