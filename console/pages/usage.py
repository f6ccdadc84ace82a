"""The usage page: GPU-hours reserved and ready, tokens and requests by user, group, organization, workflow or
endpoint over UTC hours, days or months, as line charts (the five biggest keys, the rest as "others") and a table
with its total; an administrator's also shows every budget against its use. A CSV download streams the same answer
in `berth usage -o csv`'s columns. All of it is `GET /v1/usage`'s answer as the signed-in user reads it: their own
usage, an administrator's everyone's — the API decides."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse

from berth.contracts import UsageBy, UsagePeriod, UsageReport, UsageRow
from berth.errors import BerthError, UserInputError
from berth.tokens import parse_duration
from berth.usage_csv import csv_lines
from console.charts import MAX_SERIES, LineChart, Series
from console.render import page
from console.routing import ConsoleRoute
from console.session import Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)
Field = Annotated[str, Query(max_length=64)]
AGO = re.compile(r"^\d{1,9}[smhdw]$")
OTHERS = "others"
NO_ONE = "(no one)"  # usage attributed to no one: a public endpoint's callers
DEFAULT_PERIOD = UsagePeriod.DAY.value


def _choice(text: str, choices: type[UsageBy] | type[UsagePeriod], label: str) -> str:
    values = [c.value for c in choices]
    if text not in values:
        raise UserInputError(f"{label} '{text[:32]}' is not one of {', '.join(values)}.")
    return text


def moment(text: str, now: float, label: str) -> float:
    """A Unix time from a duration ago (`7d`) or an ISO 8601 time (UTC when it names no zone: the server's local
    zone means nothing to a browser)."""
    if AGO.match(text):
        return now - parse_duration(text)
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise UserInputError(f"{label} '{text[:32]}' is neither a duration like 30m, 1h or 7d nor an ISO time "
                             "like 2026-01-31T12:00 (UTC).") from None
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


async def _report(session: Session, form: dict[str, str]) -> UsageReport:
    """The API's answer to the form; a value it would not take refused here in one line that names the field."""
    now = time.time()
    by = UsageBy(_choice(form["by"], UsageBy, "By"))
    period = UsagePeriod(_choice(form["period"], UsagePeriod, "Period"))
    since = moment(form["since"], now, "Since") if form["since"] else None
    until = moment(form["until"], now, "Until") if form["until"] else None
    if since is not None and until is not None and until <= since:
        raise UserInputError("Until must be later than since.")
    return await session.api.usage(by, since, until, period)


def _form(by: str, period: str, since: str, until: str) -> dict[str, str]:
    return {"by": by.strip() or UsageBy.USER.value, "period": period.strip() or DEFAULT_PERIOD,
            "since": since.strip(), "until": until.strip()}


def shown_keys(rows: Sequence[UsageRow]) -> list[str]:
    """The keys a chart names, biggest first (GPU-seconds reserved, then tokens, then requests); past the series a
    chart takes, the rest are summed as "others"."""
    weight: dict[str, tuple[float, int, int]] = {}
    for row in rows:
        gpu, tokens, requests = weight.get(row.key, (0.0, 0, 0))
        weight[row.key] = (gpu + row.gpu_seconds_reserved, tokens + row.tokens_in + row.tokens_out,
                           requests + row.requests)
    ranked = sorted(weight, key=lambda key: (tuple(-w for w in weight[key]), key))
    return ranked if len(ranked) <= MAX_SERIES else ranked[:MAX_SERIES - 1]


def charts(report: UsageReport) -> dict[str, LineChart]:
    """A line per shown key (and "others") over the periods, for each figure; none when there are no rows."""
    if not report.rows:
        return {}
    starts = sorted({float(row.period_start) for row in report.rows})
    keys = shown_keys(report.rows)
    lines = [*keys, OTHERS] if len({row.key for row in report.rows}) > len(keys) else keys
    index = {start: n for n, start in enumerate(starts)}
    figures = {"reserved": ("GPU-hours reserved", "GPU-h"), "ready": ("GPU-hours ready", "GPU-h"),
               "tokens": ("Tokens in + out", "tokens"), "requests": ("Requests", "requests")}
    values = {name: {line: [0.0] * len(starts) for line in lines} for name in figures}
    for row in report.rows:
        line = row.key if row.key in keys else OTHERS
        at = index[float(row.period_start)]
        for name, figure in (("reserved", row.gpu_seconds_reserved / 3600), ("ready", row.gpu_seconds_ready / 3600),
                             ("tokens", row.tokens_in + row.tokens_out), ("requests", row.requests)):
            values[name][line][at] += float(figure)
    return {name: LineChart(title, unit, starts, [Series(label(line), [round(v, 3) for v in values[name][line]])
                                                  for line in lines])
            for name, (title, unit) in figures.items()}


def label(key: str) -> str:
    return key or NO_ONE


@router.get("/usage")
async def usage(request: Request, session: Signed, by: Field = "", period: Field = "", since: Field = "",
                until: Field = "") -> Response:
    form = _form(by, period, since, until)
    report, error = None, None
    try:
        report = await _report(session, form)
    except BerthError as refused:  # a value the form or the API does not take: its one line above the form
        error = str(refused)
    query = urlencode({name: value for name, value in form.items() if value})  # the CSV link: the same answer
    return page(request, session, "usage.html", status_code=400 if error else 200, form=form, report=report,
                error=error, charts=charts(report) if report else {}, query=query, label=label,
                by_choices=[c.value for c in UsageBy], period_choices=[c.value for c in UsagePeriod])


@router.get("/usage.csv")
async def usage_csv(session: Signed, by: Field = "", period: Field = "", since: Field = "",
                    until: Field = "") -> Response:
    """The same answer as CSV, streamed as it is written (a refusal is the console's error page, in one line)."""
    form = _form(by, period, since, until)
    report = await _report(session, form)
    name = f"usage-{report.by.value}-{report.period.value if report.period else 'all'}.csv"
    return StreamingResponse(csv_lines(report), media_type="text/csv; charset=utf-8",
                             headers={"Content-Disposition": f'attachment; filename="{name}"'})
