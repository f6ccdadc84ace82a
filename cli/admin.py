"""`berth admin backup|restore`: the control plane's desired state as one JSON document on stdout, and that document
restored into an empty control plane (docs/backup.md). Administrators only."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Format, OutputOption, answer, call, console, errors, fail, table

if TYPE_CHECKING:
    from berth.contracts.backup import BackupDocument

app = typer.Typer(help="Back up and restore the control plane (administrators).", no_args_is_help=True)


@app.command("backup")
def backup() -> None:
    """Print the control plane's desired state as one JSON document: `berth admin backup > backup.json`."""
    from berth.api_backup import BackupApi

    document = call(lambda api: api.backup(), BackupApi)
    sys.stdout.write(document.model_dump_json(indent=2) + "\n")
    counts = ", ".join(f"{len(rows)} {name.replace('_', ' ')}" for name, rows in document.tables)
    # On stderr, so that stdout is the document alone.
    errors.print(f"Backed up {counts}. Secrets stay encrypted: keep the state dir's keys/ with this file, a "
                 "restore needs them.", highlight=False, soft_wrap=True)


@app.command("restore")
def restore(path: Annotated[Path, typer.Argument(help="A file `berth admin backup` wrote")],
            output: OutputOption = Format.TABLE) -> None:
    """Restore a backup into an empty control plane (with the backed-up one's keys) and start its workflows again."""
    from berth.api_backup import BackupApi

    document = read_backup(path)
    restored = answer(output, lambda api: api.restore(document), BackupApi)
    if restored is None:
        return  # printed as JSON
    rows = ", ".join(f"{count} {name.replace('_', ' ')}" for name, count in restored.rows.items())
    console.print(f"Restored {rows}.", highlight=False, soft_wrap=True)
    table([{"id": w.id, "endpoint": w.endpoint_id, "url": w.url, "started": "yes" if w.started else "no",
            "note": w.note or ""} for w in restored.workflows],
          [("id", "WORKFLOW"), ("endpoint", "ENDPOINT"), ("url", "URL"), ("started", "STARTED"), ("note", "NOTE")])


def read_backup(path: Path) -> BackupDocument:
    """The file as a backup document, or one line saying why it is not one this Berth restores."""
    from pydantic import ValidationError

    from berth.contracts.backup import BackupDocument

    try:
        return BackupDocument.model_validate(json.loads(path.read_text()))
    except OSError as error:
        raise fail(f"Cannot read {path} ({error.strerror or type(error).__name__}).") from None
    except ValueError as error:  # not JSON (json.JSONDecodeError), or not a backup (pydantic's ValidationError)
        reason = error.errors()[0]["msg"] if isinstance(error, ValidationError) else "not JSON"
        raise fail(f"{path} is not a backup this Berth restores: {reason}.") from None
