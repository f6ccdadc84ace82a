"""`GET /v1/usage` and the budget routes through the real app and the typed client, over the scripted scenario of
tests/server/usage_scenario.py: an administrator's exact figures by every key and hour; a user sees their own usage
only; budgets are administrators', refuse what names nothing, show used / budget / exceeded, and announce an exceeded
budget once however often usage is read (and on the autoscaler's tick, at most once a minute)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from berth.api_client import ApiClient
from berth.contracts import AuditBatch, AuditPhase, AuditRecord, BudgetStatus
from berth.contracts.usage import UsageBudget, UsageBy, UsagePeriod, UsageReport
from berth.errors import NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from server import usage_report
from server.app import build_context, create_app
from server.context import ServerContext
from tests.server import usage_scenario as scenario

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)
ALICE = Identity(user="alice", groups=("team-a", "team-b"), org="acme")
BOB = Identity(user="bob", groups=("team-b",), org="acme")


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = build_context(tmp_path, "127.0.0.1:1")  # the usage routes never reach Temporal
    scenario.play(context.store)
    return context


def _client(context: ServerContext, who: Identity) -> ApiClient:
    return ApiClient("http://api", context.signing.api_token(who),
                     transport=httpx.ASGITransport(app=create_app(context)))


async def _usage(context: ServerContext, who: Identity, by: UsageBy,
                 period: UsagePeriod | None = None) -> UsageReport:
    async with _client(context, who) as api:
        return await api.usage(by, scenario.SINCE, scenario.UNTIL, period)


@pytest.mark.parametrize(("by", "expected"), [(UsageBy.USER, scenario.BY_USER), (UsageBy.GROUP, scenario.BY_GROUP),
                                              (UsageBy.ORG, scenario.BY_ORG), (UsageBy.WORKFLOW, scenario.BY_WORKFLOW),
                                              (UsageBy.ENDPOINT, scenario.BY_ENDPOINT)])
async def test_an_administrator_reads_exact_figures_by_every_key(context: ServerContext, by: UsageBy,
                                                                  expected: dict[str, tuple[int, ...]]) -> None:
    answer = await _usage(context, ADMIN, by)
    assert {row.key: scenario.figures(row) for row in answer.rows} == expected
    assert scenario.figures(answer.total) == scenario.TOTAL
    assert (answer.since, answer.until, answer.by, answer.period) == (scenario.SINCE, scenario.UNTIL, by, None)


async def test_per_hour_and_a_user_sees_only_their_own(context: ServerContext) -> None:
    hourly = await _usage(context, ADMIN, UsageBy.USER, UsagePeriod.HOUR)
    assert {(r.period_start, r.key): scenario.figures(r) for r in hourly.rows} == scenario.BY_USER_HOURLY
    for who in (ALICE, BOB):
        mine = await _usage(context, who, UsageBy.USER)
        assert {r.key: scenario.figures(r) for r in mine.rows} == {who.user: scenario.BY_USER[who.user]}
        assert scenario.figures(mine.total) == scenario.BY_USER[who.user] and mine.budgets == []
    alice_by_group = await _usage(context, ALICE, UsageBy.GROUP)  # her own usage in each of her groups, not bob's
    assert {r.key: scenario.figures(r) for r in alice_by_group.rows} == {
        "team-a": scenario.BY_USER["alice"], "team-b": scenario.BY_USER["alice"]}


async def test_refusals_are_one_line(context: ServerContext) -> None:
    async with _client(context, ADMIN) as api:
        with pytest.raises(UserInputError, match="--until must be later than --since"):
            await api.usage(UsageBy.USER, scenario.UNTIL, scenario.SINCE)
        with pytest.raises(UserInputError, match="more than 2000 hours"):
            await api.usage(UsageBy.USER, scenario.SINCE, scenario.SINCE + 3000 * 3600, UsagePeriod.HOUR)
        with pytest.raises(NotFoundError, match="No group named 'team-z'"):
            await api.set_usage_budget(UsageBudget(scope="group", name="team-z", tokens=1))
        with pytest.raises(UserInputError, match="A budget needs tokens, GPU-hours or both"):
            await api.set_usage_budget(UsageBudget(scope="org", name="acme"))
        with pytest.raises(NotFoundError, match="No month budget for org 'acme'"):
            await api.remove_usage_budget("org", "acme", "month")
    async with _client(context, ALICE) as api:
        with pytest.raises(PermissionDeniedError):
            await api.set_usage_budget(UsageBudget(scope="group", name="team-a", tokens=1))
        with pytest.raises(PermissionDeniedError):
            await api.usage_budgets()


def _today(user: str, tokens: int) -> AuditBatch:
    """A request of `user` now: the budgets' current period is today's, not the scenario's."""
    now = time.time()
    return AuditBatch.of("proxy-today", 1, [
        AuditRecord(at=now, phase=AuditPhase.ATTEMPT, request_id="r-today", user=user, endpoint_id="ep-a"),
        AuditRecord(at=now, phase=AuditPhase.SUCCESS, request_id="r-today", user=user, endpoint_id="ep-a",
                    status=200, tokens_in=tokens, tokens_out=0)])


async def test_an_exceeded_budget_shows_and_is_announced_once(context: ServerContext,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    announced: list[tuple[BudgetStatus, str]] = []
    monkeypatch.setattr(usage_report, "budget_exceeded",
                        lambda _store, status, figure: announced.append((status, figure)))
    async with _client(context, ADMIN) as api:
        await api.set_usage_budget(UsageBudget(scope="org", name="acme", period="day", tokens=50))
        await api.set_usage_budget(UsageBudget(scope="group", name="team-c", period="month", tokens=1000))
        within = await api.usage_budgets()
        assert [(s.budget.name, s.tokens_used, s.exceeded) for s in within] == [("team-c", 0, []), ("acme", 0, [])]
        context.store.audit.append_batch(_today("alice", 60))
        for _ in range(2):
            report = await api.usage(UsageBy.USER, scenario.SINCE, scenario.UNTIL)
            acme = next(s for s in report.budgets if s.budget.name == "acme")
            assert (acme.tokens_used, acme.budget.tokens, acme.exceeded) == (60, 50, ["tokens"])
        assert [s.exceeded for s in await api.usage_budgets()] == [[], ["tokens"]]  # groups, then organizations
        context.budgets_checked_at = 0.0  # the tick's check is due: it finds the same exceeded budget, announced
        await usage_report.check_budgets_on_tick(context)
    assert [(status.budget.name, figure) for status, figure in announced] == [("acme", "tokens")]


async def test_the_autoscalers_tick_announces_a_budget_exceeded_with_no_one_reading_usage(
        context: ServerContext, monkeypatch: pytest.MonkeyPatch) -> None:
    announced: list[str] = []
    monkeypatch.setattr(usage_report, "budget_exceeded",
                        lambda _store, status, _figure: announced.append(status.budget.name))
    context.store.budgets.set(UsageBudget(scope="group", name="team-a", period="day", tokens=10), "root", time.time())
    context.store.audit.append_batch(_today("alice", 11))
    headers = {"Authorization": f"Bearer {context.signing.api_token(ADMIN)}"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(context)), base_url="http://api",
                                 headers=headers) as client:
        for _ in range(2):  # the second tick, within the minute, checks nothing (and would announce nothing new)
            answer = await client.post("/v1/internal/autoscaler", json={"holder": "worker-1", "ttl_s": 5})
            assert answer.status_code == 200, answer.text
            assert announced == ["team-a"]
    assert context.budgets_checked_at > 0


async def test_a_budget_exceeded_is_an_event_its_group_sees_and_others_do_not(context: ServerContext) -> None:
    context.store.budgets.set(UsageBudget(scope="group", name="team-a", period="day", tokens=10), "root", time.time())
    context.store.audit.append_batch(_today("alice", 11))
    async with _client(context, ADMIN) as api:
        await api.usage_budgets()  # an administrator's read checks the budgets: team-a's is past its 10 tokens
        await api.usage_budgets()  # announced once
    async with _client(context, ALICE) as api:  # in team-a
        seen = await api.events(kind="budget")
    assert [e.message for e in seen.events] == ["usage budget exceeded: group team-a, 11 tokens used of 10 this day"]
    async with _client(context, Identity(user="carol", groups=("team-c",), org="beta")) as api:
        assert (await api.events(kind="budget")).events == []
