"""The usage page over the real app (in-process) and the scripted usage of tests/server/usage_scenario.py: the form,
a line chart per figure with a line per key over the hours, the rows and their exact total, an administrator's
budgets with used / budget / exceeded, the CSV download in `berth usage -o csv`'s columns, a user who sees only their
own usage, a bad form value answered in one line, and "others" past the keys a chart names."""

from __future__ import annotations

import html
import json
import re
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from berth.contracts import AuditBatch, AuditPhase, AuditRecord, UsageBudget, UsageBy, UsageReport, UsageRow
from console.pages.usage import charts
from server.app import build_context
from server.context import ServerContext
from tests.console.app_support import browser, sign_in, user_token
from tests.server import usage_scenario as scenario

pytestmark = pytest.mark.timeout(60)
WINDOW = "since=2026-01-01T00:00&until=2026-01-01T02:00"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    """The scenario, a token budget for acme, and one request of alice's now, past that budget this month."""
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # not console_context: bob is acme's here
    scenario.play(context.store)
    now = time.time()
    month = datetime.fromtimestamp(now, UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0).timestamp()
    at = max(month, now - 60)
    context.store.audit.append_batch(AuditBatch.of("proxy-1", 2, [
        AuditRecord(at=at, phase=AuditPhase.ATTEMPT, request_id="now", user="alice", endpoint_id="ep-a"),
        AuditRecord(at=at, phase=AuditPhase.SUCCESS, request_id="now", status=200, user="alice", endpoint_id="ep-a",
                    copy_id="ep-a.copy-0", tokens_in=5, tokens_out=6)]))
    context.store.budgets.set(UsageBudget(scope="org", name="acme", tokens=10), "admin", now)
    return context


def _spec(page: str, chart_id: str) -> dict[str, Any]:
    found = re.search(rf"""<figure class="chart" id="{chart_id}" data-chart='([^']*)'>""", page)
    assert found, f"no chart {chart_id}"
    return json.loads(html.unescape(found.group(1)))


def _lines(spec: dict[str, Any]) -> dict[str, list[float]]:
    return {series["name"]: series["values"] for series in spec["series"]}


async def _get(context: ServerContext, who: str, path: str) -> tuple[int, str, dict[str, str]]:
    async with browser(context) as client:
        await sign_in(client, user_token(context, who))
        answer = await client.get(path)
    return answer.status_code, answer.text, dict(answer.headers)


async def test_an_administrator_sees_everyone_as_charts_a_table_and_budgets(context: ServerContext) -> None:
    status, page, _ = await _get(context, "admin", f"/ui/usage?by=user&period=hour&{WINDOW}")
    assert status == 200 and '<a href="/ui/usage" aria-current="page">Usage</a>' in page
    assert '<script src="/ui/static/charts.js" defer></script>' in page and "style=" not in page
    reserved = _spec(page, "chart-usage-reserved")
    assert reserved["kind"] == "line" and reserved["x"] == [scenario.T0, scenario.T0 + scenario.HOUR]
    # alice: 6000 GPU-s in each hour; bob 1800 in the first; carol 3600 in the first; no one: none.
    assert _lines(reserved) == {"alice": [1.667, 1.667], "carol": [1.0, 0.0], "bob": [0.5, 0.0],
                                "(no one)": [0.0, 0.0]}
    assert _lines(_spec(page, "chart-usage-tokens"))["carol"] == [0.0, 300.0]
    assert _lines(_spec(page, "chart-usage-requests"))["bob"] == [1.0, 1.0]
    assert _lines(_spec(page, "chart-usage-ready"))["alice"] == [1.333, 0.333]
    assert page.count('<tr data-key="alice">') == 2 and '<tr data-key="">' in page
    total = ("<td>4.833</td><td>3.083</td><td>6</td><td>1</td><td>126</td><td>234</td>")  # 17400 s, 11100 s
    assert f'<tr id="usage-total"><th scope="row">Total</th><td></td>{total}</tr>' in page
    budget = page.split('<tr data-id="org/acme/month">')[1].split("</tr>")[0]
    assert "<td>11 / 10</td>" in budget and '<td class="state-false">tokens</td>' in budget
    assert 'id="usage-csv" href="/ui/usage.csv?by=user&amp;period=hour&amp;since=2026-01-01T00%3A00' in page


async def test_a_user_sees_only_their_own_usage_and_no_budgets(context: ServerContext) -> None:
    _, page, _ = await _get(context, "alice", f"/ui/usage?by=endpoint&period=hour&{WINDOW}")
    assert _lines(_spec(page, "chart-usage-tokens")) == {"ep-a": [30.0, 3.0]}
    assert "ep-b" not in page and "ep-c" not in page and "bob" not in page.split("</header>")[-1]
    assert 'id="usage-budgets"' not in page
    _, csv_text, _ = await _get(context, "alice", f"/ui/usage.csv?by=user&period=hour&{WINDOW}")
    assert {line.split(",")[0] for line in csv_text.splitlines()[1:]} == {"alice"}


async def test_the_csv_download_is_the_clis_columns_exactly(context: ServerContext) -> None:
    status, text, headers = await _get(context, "admin", f"/ui/usage.csv?by=org&period=day&{WINDOW}")
    assert status == 200 and headers["content-type"] == "text/csv; charset=utf-8"
    assert headers["content-disposition"] == 'attachment; filename="usage-org-day.csv"'
    assert text == (
        "org,period_start,period_end,gpu_seconds_reserved,gpu_seconds_ready,requests,successes,failures,tokens_in,"
        "tokens_out\n"
        ",2026-01-01T00:00:00Z,2026-01-01T02:00:00Z,0.0,0.0,1,1,0,3,4\n"
        "acme,2026-01-01T00:00:00Z,2026-01-01T02:00:00Z,13800.0,7500.0,4,3,1,23,30\n"
        "beta,2026-01-01T00:00:00Z,2026-01-01T02:00:00Z,3600.0,3600.0,1,1,0,100,200\n")


@pytest.mark.parametrize(("query", "line"), [
    ("by=planet", "By 'planet' is not one of user, group, org, workflow, endpoint."),
    ("period=week", "Period 'week' is not one of hour, day, month."),
    ("since=yesterday", "Since 'yesterday' is neither a duration like 30m, 1h or 7d nor an ISO time"),
    ("since=1h&until=2h", "Until must be later than since."),
])
async def test_a_bad_form_value_is_answered_in_one_line(context: ServerContext, query: str, line: str) -> None:
    status, page, _ = await _get(context, "bob", f"/ui/usage?{query}")
    assert status == 400 and f'<p class="error" role="alert">{line}' in html.unescape(page)
    assert page.count('role="alert"') == 1 and 'id="usage-filter"' in page and 'id="usage-rows"' not in page
    status, page, _ = await _get(context, "bob", f"/ui/usage.csv?{query}")
    assert status == 400 and line in html.unescape(page)


async def test_a_window_with_nothing_used_says_so(context: ServerContext) -> None:
    _, page, _ = await _get(context, "bob", "/ui/usage?since=2025-01-01&until=2025-01-02")
    assert "Nothing used in this window." in page and "chart-usage-reserved" not in page


def test_past_the_series_a_chart_takes_the_smallest_keys_are_summed_as_others() -> None:
    rows = [UsageRow(key=f"u{n}", period_start=0, period_end=3600, gpu_seconds_reserved=3600 * n,
                     gpu_seconds_ready=0, requests=1, successes=1, failures=0, tokens_in=0, tokens_out=0)
            for n in range(1, 9)]
    report = UsageReport(by=UsageBy.USER, period=None, since=0, until=3600, rows=rows, total=rows[0], budgets=[],
                         note="")
    reserved = _lines(charts(report)["reserved"].spec())
    assert reserved == {"u8": [8.0], "u7": [7.0], "u6": [6.0], "u5": [5.0], "u4": [4.0], "others": [6.0]}
