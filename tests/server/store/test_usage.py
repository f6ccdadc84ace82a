"""Usage in the store (server/store/usage.py), on SQLite and on a real PostgreSQL, against the scripted scenario of
tests/server/usage_scenario.py: exact GPU-seconds reserved and ready, requests and tokens per user, group,
organization, workflow and endpoint, per hour and over the window; a user's own usage alone; a re-placed copy's new
span; budgets against their period's use, and an exceeded one recorded once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from berth.contracts.usage import UsageBudget, UsageBy, UsagePeriod
from berth.errors import UserInputError
from berth.security import Cipher
from server.store import usage
from server.store.database import Store
from server.store.tables import CopySpanRow
from server.store.usage import UsageQuery
from server.usage_periods import Span
from tests.server import usage_scenario as scenario

pytestmark = pytest.mark.timeout(120)
WINDOW = Span(scenario.SINCE, scenario.UNTIL)


@pytest.fixture
def store(store_url: str, tmp_path: Path) -> Store:
    store = Store(store_url, Cipher.load_or_create(tmp_path / "keys"))
    scenario.play(store)
    return store


def _by(store: Store, by: UsageBy, period: UsagePeriod | None = None,
        user: str | None = None) -> dict[object, tuple[float, ...]]:
    rows = store.usage.rows(UsageQuery(by=by, window=WINDOW, period=period, user=user), scenario.NOW)
    if period is None:
        assert all((r.period_start, r.period_end) == (scenario.SINCE, scenario.UNTIL) for r in rows)
        return {r.key: scenario.figures(r) for r in rows}
    return {(r.period_start, r.key): scenario.figures(r) for r in rows}


def test_totals_are_exact_by_every_key(store: Store) -> None:
    assert _by(store, UsageBy.USER) == scenario.BY_USER
    assert _by(store, UsageBy.ORG) == scenario.BY_ORG
    assert _by(store, UsageBy.GROUP) == scenario.BY_GROUP  # alice in both of her groups; no group for no one
    assert _by(store, UsageBy.WORKFLOW) == scenario.BY_WORKFLOW
    assert _by(store, UsageBy.ENDPOINT) == scenario.BY_ENDPOINT
    total = store.usage.total(UsageQuery(by=UsageBy.GROUP, window=WINDOW), scenario.NOW)
    assert scenario.figures(total) == scenario.TOTAL  # each figure once, whatever the rows' attribution


def test_per_hour_the_periods_split_spans_and_requests_exactly(store: Store) -> None:
    assert _by(store, UsageBy.USER, UsagePeriod.HOUR) == scenario.BY_USER_HOURLY
    by_day = _by(store, UsageBy.USER, UsagePeriod.DAY)  # one day, clipped to the window: the window's figures
    assert by_day == {(scenario.SINCE, key): value for key, value in scenario.BY_USER.items()}
    by_month = _by(store, UsageBy.ORG, UsagePeriod.MONTH)  # months join the periods' table
    assert by_month == {(scenario.SINCE, key): value for key, value in scenario.BY_ORG.items()}


def test_a_window_starting_inside_an_hour_clips_its_first_period(store: Store) -> None:
    half_past = scenario.T0 + 1800
    rows = store.usage.rows(UsageQuery(by=UsageBy.USER, window=Span(half_past, scenario.UNTIL),
                                       period=UsagePeriod.HOUR), scenario.NOW)
    first = [(r.key, r.period_start, r.period_end, scenario.figures(r)) for r in rows if r.period_start < scenario.T0
             + scenario.HOUR]
    # Alice's copy alone held GPUs from 00:30 (bob's was released at 00:30, carol's at 00:15); no request then.
    assert first == [("alice", half_past, scenario.T0 + scenario.HOUR, (3600, 3600, 0, 0, 0, 0, 0))]


def test_an_answer_too_large_is_refused_in_one_line(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(usage, "MAX_ROWS", 6)  # the hourly answer by user has 7 rows
    with pytest.raises(UserInputError, match="more than 6 rows: ask by a coarser key or --period"):
        _by(store, UsageBy.USER, UsagePeriod.HOUR)
    assert len(_by(store, UsageBy.USER, UsagePeriod.DAY)) == 4


def test_a_user_sees_only_their_own_usage(store: Store) -> None:
    assert _by(store, UsageBy.USER, user="bob") == {"bob": scenario.BY_USER["bob"]}
    assert _by(store, UsageBy.WORKFLOW, user="bob") == {"wf-a": (0, 0, 1, 0, 1, 5, 0),  # bob's request to alice's
                                                        "wf-b": scenario.BY_WORKFLOW["wf-b"]}
    total = store.usage.total(UsageQuery(by=UsageBy.USER, window=WINDOW, user="bob"), scenario.NOW)
    assert scenario.figures(total) == scenario.BY_USER["bob"]


def test_a_copy_placed_again_gets_a_new_span_and_an_open_span_counts_until_now(store: Store) -> None:
    with store.session() as s:
        spans = s.execute(select(CopySpanRow.reserved_at, CopySpanRow.ready_at, CopySpanRow.released_at,
                                 CopySpanRow.gpus, CopySpanRow.owner, CopySpanRow.org)
                          .where(CopySpanRow.copy_id == "wf-a.copy-0").order_by(CopySpanRow.id)).all()
    t0 = scenario.T0
    assert [tuple(span) for span in spans] == [(t0 + 600, t0 + 1200, t0 + 4200, 2, "alice", "acme"),
                                               (t0 + 4800, None, None, 2, "alice", "acme")]
    later = store.usage.rows(UsageQuery(by=UsageBy.WORKFLOW, window=WINDOW), scenario.NOW - 1200)
    assert {r.key: r.gpu_seconds_reserved for r in later}["wf-a"] == 12000 - 2 * 1200


def test_budgets_show_their_period_use_and_an_exceeded_one_is_recorded_once(store: Store) -> None:
    store.budgets.set(UsageBudget(scope="org", name="acme", period="day", tokens=50, gpu_hours=3.0), "root",
                      scenario.NOW)
    store.budgets.set(UsageBudget(scope="group", name="team-b", period="month", tokens=3000), "root",
                      scenario.NOW)
    statuses = {(s.budget.scope, s.budget.name): s for s in store.budgets.statuses(scenario.NOW)}
    acme = statuses[("org", "acme")]
    # The whole UTC day, not the window: alice's request at 02:00 counts too (the one at 23:59 the day before not).
    assert (acme.tokens_used, acme.gpu_hours_used, acme.exceeded) == (2053, 13800 / 3600, ["tokens", "gpu_hours"])
    assert (acme.period_start, acme.period_end) == (scenario.T0, scenario.T0 + 24 * scenario.HOUR)
    team_b = statuses[("group", "team-b")]
    assert (team_b.tokens_used, team_b.exceeded) == (2053, [])
    assert store.budgets.first_exceeded(acme, "gpu_hours", scenario.NOW)
    assert not store.budgets.first_exceeded(acme, "gpu_hours", scenario.NOW + 1)
    store.budgets.remove("group", "team-b", "month")
    assert [b.name for b in store.budgets.budgets()] == ["acme"]
