"""Usage as CSV, the same columns for `berth usage -o csv` and the console's CSV download (docs/usage.md): a row per
key and period — the key (headed by what it is: user, group, …), the period's UTC bounds in ISO 8601 and every
figure, GPU-seconds exact. Kept apart from cli/ so that the console can share it without importing the CLI, and
free of runtime contract imports so that the CLI's start stays light."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from berth.contracts.usage import UsageReport

FIGURES = ("gpu_seconds_reserved", "gpu_seconds_ready", "requests", "successes", "failures", "tokens_in",
           "tokens_out")


def utc(at: float) -> str:
    """A Unix time as ISO 8601 UTC to the second, `Z`-suffixed."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def csv_lines(report: UsageReport) -> Iterator[str]:
    """The header, then one line per row, each ending in a newline (a streamed download sends them as they come)."""
    import csv  # only when CSV is asked for: every CLI command's start imports this module

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow([report.by.value, "period_start", "period_end", *FIGURES])
    for row in report.rows:
        writer.writerow([row.key, utc(row.period_start), utc(row.period_end), *(getattr(row, f) for f in FIGURES)])
        yield _taken(buffer)
    if not report.rows:
        yield _taken(buffer)


def _taken(buffer: io.StringIO) -> str:
    text = buffer.getvalue()
    buffer.seek(0)
    buffer.truncate()
    return text
