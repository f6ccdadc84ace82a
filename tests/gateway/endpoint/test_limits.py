"""The limits engine on in-memory counters: each limit hit and stayed under, every scope, the daily budget,
the size caps, shedding by priority, refusals' bodies and headers, overrides, and the tickets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from berth.contracts import LimitPolicy, endpoint_limits
from berth.errors import UserInputError
from berth.settings import limit_policy, redis_url
from gateway.endpoint.counters import TOKENS, Check, MemoryCounters
from gateway.endpoint.limits import Asked, Limiter, Refused, _checks, check_priority

T0 = 1_800_000_000.0  # an epoch minute's start (divisible by 60)


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def limiter(policy: dict, clock: Clock | None = None) -> Limiter:
    return Limiter(LimitPolicy.model_validate(policy), MemoryCounters(), clock=clock or Clock())


ASKED = Asked(endpoint_id="ep1", model="m1", user="alice", org="acme", groups=("g1",), project="p1",
              session="s1", key_id="k1")

# scope -> a request of another member of that scope (counted apart)
OTHER_MEMBER = {"org": {"org": "other"}, "group": {"groups": ("g2",)}, "model": {"model": "m2"},
                "user": {"user": "bob"}, "project": {"project": "p2"}, "session": {"session": "s2"}}
SCOPES = ["global", *OTHER_MEMBER]


def other(asked: Asked, **changes: object) -> Asked:
    fields = {name: getattr(asked, name) for name in asked.__dataclass_fields__}
    return Asked(**{**fields, **changes})  # type: ignore[arg-type]


@pytest.mark.parametrize("scope", SCOPES)
async def test_requests_per_minute_per_scope(scope: str) -> None:
    clock = Clock(T0 + 20)
    lim = limiter({scope: {"requests_per_minute": 2}}, clock)
    for _ in range(2):  # under it
        await lim.admit(ASKED)
    with pytest.raises(Refused) as refused:
        await lim.admit(ASKED)
    error = refused.value
    assert (error.status, error.limit, error.retry_after_s) == (429, "requests_per_minute", 40)
    assert "2 requests per minute" in error.message
    assert (scope if scope != "global" else "all requests") in error.message
    if scope != "global":  # another member of the scope has its own count
        await lim.admit(other(ASKED, **OTHER_MEMBER[scope]))
    clock.now = T0 + 60  # the next window starts at zero
    await lim.admit(ASKED)


@pytest.mark.parametrize("scope", SCOPES)
async def test_tokens_per_minute_per_scope(scope: str) -> None:
    lim = limiter({scope: {"tokens_per_minute": 100}})
    ticket = await lim.admit(ASKED)
    await ticket.finish(99)
    ticket = await lim.admit(ASKED)  # 99 < 100: under it
    await ticket.finish(1)
    with pytest.raises(Refused) as refused:
        await lim.admit(ASKED)
    assert (refused.value.status, refused.value.limit) == (429, "tokens_per_minute")
    assert refused.value.retry_after_s == 60


@pytest.mark.parametrize("scope", SCOPES)
async def test_concurrent_per_scope(scope: str) -> None:
    lim = limiter({scope: {"concurrent": 2}})
    first, second = await lim.admit(ASKED), await lim.admit(ASKED)
    with pytest.raises(Refused) as refused:
        await lim.admit(ASKED)
    assert (refused.value.status, refused.value.limit, refused.value.retry_after_s) == (429, "concurrent", 1)
    await first.finish(0)
    third = await lim.admit(ASKED)  # the slot was released
    for ticket in (second, third):
        await ticket.finish(0)


async def test_a_request_without_a_scope_member_is_not_counted_there() -> None:
    lim = limiter({"project": {"requests_per_minute": 1}, "session": {"requests_per_minute": 1}})
    bare = Asked(endpoint_id="ep1", user="alice")
    for _ in range(5):
        await lim.admit(bare)


async def test_every_group_of_the_caller_is_counted() -> None:
    lim = limiter({"group": {"requests_per_minute": 1}})
    await lim.admit(other(ASKED, groups=("g1", "g2")))
    with pytest.raises(Refused, match="group g2"):
        await lim.admit(other(ASKED, groups=("g2",)))


async def test_admit_is_all_or_nothing() -> None:
    lim = limiter({"global": {"requests_per_minute": 10}, "org": {"concurrent": 5},
                   "user": {"requests_per_minute": 1}})
    await lim.admit(ASKED)
    for _ in range(3):  # refused by the user scope, checked after global and org
        with pytest.raises(Refused, match="user alice"):
            await lim.admit(ASKED)
    counters = lim.counters
    assert isinstance(counters, MemoryCounters)
    assert counters.used(_check(lim, "requests_per_minute:global:*"), T0) == 1
    assert counters._in_flight == {"concurrent:org:acme": 1}


def _check(lim: Limiter, key: str) -> Check:
    """The check named `key` that an admit of ASKED makes."""
    return next(check for check in _checks(lim._plan_for(None), ASKED) if check.key == key)


@pytest.mark.parametrize("field,scope_label", [("daily_tokens_per_user", "user alice"),
                                               ("daily_tokens_per_key", "API key k1")])
async def test_daily_token_budget(field: str, scope_label: str) -> None:
    clock = Clock(T0 + 3600)
    lim = limiter({field: 1000}, clock)
    ticket = await lim.admit(ASKED)
    await ticket.finish(600)
    clock.now += 120  # a later minute, the same day: still counted
    ticket = await lim.admit(ASKED)  # 600 < 1000: under it
    await ticket.finish(400)
    with pytest.raises(Refused) as refused:
        await lim.admit(ASKED)
    assert (refused.value.status, refused.value.limit) == (429, "daily_tokens")
    assert scope_label in refused.value.message
    day_end = (clock.now // 86400 + 1) * 86400
    assert refused.value.retry_after_s == int(day_end - clock.now)
    await lim.admit(other(ASKED, user="bob", key_id="k2"))  # someone else's budget
    clock.now = day_end  # a new UTC day
    await lim.admit(ASKED)


async def test_key_limits_from_its_verdict() -> None:
    lim = limiter({})
    asked = other(ASKED, key_tokens_per_minute=50, key_max_concurrent=1)
    ticket = await lim.admit(asked)
    with pytest.raises(Refused, match="API key k1") as refused:
        await lim.admit(asked)
    assert refused.value.limit == "max_concurrent"
    await ticket.finish(50)
    with pytest.raises(Refused) as refused:
        await lim.admit(asked)
    assert refused.value.limit == "tokens_per_minute"
    await lim.admit(other(asked, key_id="k2"))


async def test_prompt_cap() -> None:
    lim = limiter({"max_prompt_tokens": 100})
    assert lim.needs_body(None)
    await lim.admit(other(ASKED, prompt_chars=400))  # 100 tokens: at the cap
    with pytest.raises(Refused) as refused:
        await lim.admit(other(ASKED, prompt_chars=401))
    assert (refused.value.status, refused.value.limit, refused.value.retry_after_s) == (413, "max_prompt_tokens", None)


async def test_max_tokens_cap() -> None:
    lim = limiter({"max_tokens": 256})
    await lim.admit(other(ASKED, max_tokens=256))
    await lim.admit(other(ASKED, max_tokens=None))
    with pytest.raises(Refused) as refused:
        await lim.admit(other(ASKED, max_tokens=257))
    assert (refused.value.status, refused.value.limit) == (413, "max_tokens")


async def test_context_check() -> None:
    lim = limiter({"context_check": True})
    await lim.admit(other(ASKED, prompt_chars=4000, max_tokens=1048, max_context=2048))  # 1000 + 1048
    await lim.admit(other(ASKED, prompt_chars=40_000, max_tokens=10))  # context unknown: not checked
    with pytest.raises(Refused) as refused:
        await lim.admit(other(ASKED, prompt_chars=4000, max_tokens=1049, max_context=2048))
    assert (refused.value.status, refused.value.limit) == (413, "context")
    assert "2048" in refused.value.message


async def test_body_limit_on_by_default() -> None:
    lim = limiter({})
    lim.check_body(1024 * 1024)
    with pytest.raises(Refused) as refused:
        lim.check_body(1024 * 1024 + 1)
    assert (refused.value.status, refused.value.limit) == (413, "body_limit_bytes")
    lim.check_body(5 * 1024 * 1024, LimitPolicy.model_validate({"body_limit_bytes": None}))  # turned off
    with pytest.raises(Refused):
        lim.check_body(2000, LimitPolicy.model_validate({"body_limit_bytes": 1000}))


@pytest.mark.parametrize("priority,threshold", [("low", 5), ("normal", 10), ("high", 20)])
async def test_shedding_by_priority(priority: str, threshold: float) -> None:
    lim = limiter({"shed_queue_depth": 10})
    asked = other(ASKED, priority=priority)
    await lim.admit(asked, queue_depths=[threshold, threshold + 100])  # one copy at the threshold: not above
    await lim.admit(asked, queue_depths=[])  # no copy reported: nothing to shed on
    with pytest.raises(Refused) as refused:
        await lim.admit(asked, queue_depths=[threshold + 0.5, threshold + 3])
    assert (refused.value.status, refused.value.limit, refused.value.retry_after_s) == (429, "shed_queue_depth", 1)
    assert priority in refused.value.message


async def test_bad_priority_is_a_400_naming_the_allowed_values() -> None:
    lim = limiter({})
    with pytest.raises(Refused) as refused:
        await lim.admit(other(ASKED, priority="urgent"))
    assert (refused.value.status, refused.value.limit) == (400, "priority")
    assert "low, normal, high" in refused.value.message
    assert check_priority(None) == "normal" and check_priority("high") == "high"
    with pytest.raises(Refused):
        check_priority("HIGH")


async def test_refusal_body_and_headers() -> None:
    lim = limiter({"user": {"requests_per_minute": 1}}, Clock(T0 + 45))
    await lim.admit(ASKED)
    with pytest.raises(Refused) as refused:
        await lim.admit(ASKED)
    body = json.loads(refused.value.body())
    assert body["error"]["type"] == "rate_limit_exceeded"
    assert body["error"]["code"] == "requests_per_minute" and body["error"]["param"] is None
    assert "user alice" in body["error"]["message"] and "\n" not in body["error"]["message"]
    assert refused.value.headers() == [(b"content-type", b"application/json"), (b"retry-after", b"15")]
    assert Refused(413, "max_tokens", "x").headers() == [(b"content-type", b"application/json")]


async def test_override_wins_and_counts_within_its_endpoint() -> None:
    lim = limiter({"user": {"requests_per_minute": 1, "concurrent": 1}, "max_tokens": 10})
    override = endpoint_limits({"user": {"requests_per_minute": 3}, "max_tokens": None})
    assert not lim.needs_body(override) and lim.needs_body(None)
    asked = other(ASKED, max_tokens=1000)
    tickets = [await lim.admit(asked, override)]
    with pytest.raises(Refused, match="concurrent"):  # the cluster's concurrency limit still holds
        await lim.admit(asked, override)
    for _ in range(2):
        await tickets.pop().finish(0)
        tickets.append(await lim.admit(asked, override))
    await tickets.pop().finish(0)
    with pytest.raises(Refused, match="on endpoint ep1"):
        await lim.admit(asked, override)
    await lim.admit(other(ASKED, endpoint_id="ep2"), override)  # the override's count is per endpoint


async def test_no_limits_set_counts_nothing() -> None:
    lim = limiter({})
    ticket = await lim.admit(ASKED)
    assert ticket.finished and not lim.needs_body(None)
    await ticket.finish(10)
    assert isinstance(lim.counters, MemoryCounters) and lim.counters.size() == 0


async def test_finish_is_idempotent() -> None:
    lim = limiter({"user": {"concurrent": 2, "tokens_per_minute": 100}})
    held = await lim.admit(ASKED)
    ticket = await lim.admit(ASKED)
    for _ in range(3):
        await ticket.finish(30)
    third = await lim.admit(ASKED)  # one slot freed, once: the held one still counts
    with pytest.raises(Refused, match="concurrent"):
        await lim.admit(ASKED)
    counters = lim.counters
    assert isinstance(counters, MemoryCounters)
    assert counters.used(_tokens_check(lim), T0) == 30
    for done in (held, third):
        await done.finish(0)
    assert counters._in_flight == {}


def _tokens_check(lim: Limiter) -> Check:
    return next(check for check in _checks(lim._plan_for(None), ASKED) if check.kind == TOKENS)


async def test_memory_is_bounded_old_windows_dropped() -> None:
    clock = Clock()
    lim = limiter({"session": {"requests_per_minute": 5}}, clock)
    counters = lim.counters
    assert isinstance(counters, MemoryCounters)
    for minute in range(5):
        clock.now = T0 + 60 * minute
        for session in range(100):
            await lim.admit(other(ASKED, session=f"{minute}-{session}"))
        assert counters.size() == 100  # only this minute's sessions


def test_limits_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_LIMITS_FILE", raising=False)
    assert limit_policy() == LimitPolicy()
    path = tmp_path / "limits.yaml"
    path.write_text("global:\n  requests_per_minute: 100\ndaily_tokens_per_user: 5000\n")
    monkeypatch.setenv("BERTH_LIMITS_FILE", str(path))
    policy = limit_policy()
    assert policy.global_.requests_per_minute == 100 and policy.daily_tokens_per_user == 5000
    assert policy.body_limit_bytes == 1024 * 1024
    (tmp_path / "limits.json").write_text(json.dumps({"user": {"concurrent": 4}}))
    monkeypatch.setenv("BERTH_LIMITS_FILE", str(tmp_path / "limits.json"))
    assert limit_policy().user.concurrent == 4
    for content, expected in [(None, "cannot be read"), ("user: {concurrent: 0}\n", "user.concurrent"),
                              ("usr: {}\n", "usr: Extra inputs"), ("[1, 2]\n", "must be a mapping"),
                              ("a: [\n", "not valid YAML")]:
        bad = tmp_path / "bad.yaml"
        bad.unlink(missing_ok=True)
        if content is not None:
            bad.write_text(content)
        monkeypatch.setenv("BERTH_LIMITS_FILE", str(bad))
        with pytest.raises(UserInputError, match=expected) as error:
            limit_policy()
        assert "\n" not in str(error.value) and "BERTH_LIMITS_FILE" in str(error.value)


def test_endpoint_annotation() -> None:
    assert endpoint_limits(None) is None
    assert endpoint_limits({"max_tokens": 5}).max_tokens == 5  # type: ignore[union-attr]
    with pytest.raises(UserInputError, match="`limits` annotation: max_tokens"):
        endpoint_limits({"max_tokens": "lots"})
    with pytest.raises(UserInputError, match="mapping"):
        endpoint_limits("rpm=5")


def test_redis_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BERTH_REDIS_URL", raising=False)
    assert redis_url() is None
    monkeypatch.setenv("BERTH_REDIS_URL", " redis://10.0.0.5:6379/0 ")
    assert redis_url() == "redis://10.0.0.5:6379/0"


def test_the_limiter_counts_in_redis_only_when_told_and_imports_its_client_only_then() -> None:
    """The Redis client (and the OpenTelemetry metrics it loads) cost every proxy's start ~0.2 s of CPU: a proxy
    that counts in memory never imports it."""
    code = ("import os, sys; from gateway.endpoint.admission import limiter_from_settings; "
            "print(type(limiter_from_settings().counters).__name__, 'redis' in sys.modules); "
            "os.environ['BERTH_REDIS_URL'] = 'redis://127.0.0.1:9/0'; "
            "print(type(limiter_from_settings().counters).__name__, 'redis' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "BERTH_REDIS_URL"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env,
                            cwd=Path(__file__).parents[3], check=True)
    assert result.stdout.split() == ["MemoryCounters", "False", "RedisCounters", "True"]



def test_a_route_keeps_its_override_object_while_unchanged() -> None:
    """The limiter keeps a plan per override object: a refresh that brings the same override (an explicit
    null included) keeps the object; a changed one replaces it."""
    from berth.contracts import RouteEntry
    from gateway.endpoint.route_table import build_route

    sent = {"limits": {"user": {"requests_per_minute": 5}, "max_tokens": None}}
    entry = RouteEntry.model_validate({"id": "ep1", "scope": "user", "owner": "alice", "org": "acme", **sent})
    route = build_route(entry, None, {}, {})
    assert route.limits is not None and route.limits.set_by("max_tokens") and route.limits.max_tokens is None
    again = build_route(RouteEntry.model_validate(entry.model_dump(by_alias=True, exclude_unset=True)), route, {}, {})
    assert again.limits is route.limits
    unset = entry.model_copy(update={"limits": endpoint_limits({"user": {"requests_per_minute": 5}})})
    assert build_route(unset, route, {}, {}).limits is not route.limits  # max_tokens no longer turned off
    bare = RouteEntry.model_validate({"id": "ep1", "scope": "user", "owner": "alice", "org": "acme"})
    assert build_route(bare, route, {}, {}).limits is None and "limits" not in bare.model_dump(exclude_unset=True)
