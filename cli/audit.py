"""`berth audit list|verify`: the audit chain's rows (yours; an administrator: everyone's), and recomputing
the chain to find the first row someone changed."""

from __future__ import annotations

import re
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer

from berth.contracts.choices import MAX_AUDIT_LIST
from cli.common import Format, OutputOption, call, console, emit_json, fail, listing

if TYPE_CHECKING:
    from berth.contracts.audit import AuditRow

app = typer.Typer(help="The audit chain: one row per phase of each proxied request, hash-linked.",
                  no_args_is_help=True)
AGO = re.compile(r"^\d{1,9}[smhdw]$")


def since_time(text: str, now: float | None = None, option: str = "--since") -> float:
    """A Unix time from `1h` (that long ago) or an ISO 8601 time (local time when it names no zone); a refusal
    names `option`."""
    from berth.tokens import parse_duration

    if AGO.match(text.strip()):
        return (datetime.now().timestamp() if now is None else now) - parse_duration(text)
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        shown = text if len(text) <= 32 else text[:32] + "…"
        raise fail(f"{option} '{shown}' is neither a duration like 30m, 1h or 7d nor an ISO time "
                   "like 2026-01-31T12:00.") from None


def _rows(rows: list[AuditRow]) -> list[dict[str, object]]:
    return [{**row.model_dump(mode="json"), "when": datetime.fromtimestamp(row.at).strftime("%Y-%m-%d %H:%M:%S"),
             "tokens": f"{row.tokens_in}/{row.tokens_out}", "latency": f"{row.latency_ms:.1f}",
             "hash": row.hash[:12]} for row in rows]


@app.command("list")
def audit_list(endpoint: Annotated[str | None, typer.Option(help="One endpoint's rows")] = None,
               key: Annotated[str | None, typer.Option(help="One API key's rows")] = None,
               since: Annotated[str | None, typer.Option(help="Rows since a duration ago (1h) or an ISO time")]
               = None,
               limit: Annotated[int, typer.Option(min=1, max=MAX_AUDIT_LIST, help="The newest N rows")] = 100,
               output: OutputOption = Format.TABLE) -> None:
    """List the newest audit rows in chain order: yours, or everyone's for an administrator."""
    start = since_time(since) if since is not None else None
    listing(output, lambda api: api.audit(endpoint, key, start, limit),
            [("seq", "SEQ"), ("when", "AT"), ("phase", "PHASE"), ("request_id", "REQUEST"), ("status", "STATUS"),
             ("user", "USER"), ("endpoint_id", "ENDPOINT"), ("copy_id", "COPY"), ("key_id", "KEY"),
             ("tokens", "TOKENS IN/OUT"), ("latency", "MS"), ("hash", "HASH")], _rows)


@app.command("verify")
def audit_verify(output: OutputOption = Format.TABLE) -> None:
    """Recompute every row's hash and link (administrators); exit 1 naming the first broken row."""
    verdict = call(lambda api: api.verify_audit())
    if output is Format.JSON:
        emit_json(verdict)
        if not verdict.ok:
            raise typer.Exit(1)
    elif not verdict.ok:
        raise fail(verdict.message)
    else:
        console.print(verdict.message, highlight=False)
