"""LiteLLM's custom routing strategy, driven directly: a stand-in router with LiteLLM's installation
behaviour, deployments as gateway.litellm_hooks.replica_sync adds them, and /metrics answered by a mock transport."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from gateway.litellm_hooks import policy_routing
from gateway.litellm_hooks.policy_routing import PolicyRouting

MODEL = "openai/gpt-oss-20b"
FALLBACK = {"model_name": MODEL, "chosen_by": "litellm"}
CALL_IDS = (f"call-{number}" for number in itertools.count())


def prometheus(running: float = 0, waiting: float = 0, kv: float = 0, ttft_sum: float = 0,
               ttft_count: float = 0) -> str:
    labels = '{engine="0",model_name="m"}'
    return "\n".join([
        f"vllm:num_requests_running{labels} {running}", f"vllm:num_requests_waiting{labels} {waiting}",
        f"vllm:kv_cache_usage_perc{labels} {kv}", f"vllm:time_to_first_token_seconds_sum{labels} {ttft_sum}",
        f"vllm:time_to_first_token_seconds_count{labels} {ttft_count}", ""])


@dataclass
class Engines:
    """What each replica's /metrics answers, by host; a host missing from `pages` refuses the connection.
    Like a guarded copy, each wants its own key (`key-HOST`) on /metrics, and answers 401 without it."""

    pages: dict[str, str] = field(default_factory=dict)

    def handle(self, request: httpx.Request) -> httpx.Response:
        page = self.pages.get(request.url.host)
        if page is None:
            raise httpx.ConnectError("refused", request=request)
        if request.headers.get("authorization") != f"Bearer key-{request.url.host}":
            return httpx.Response(401, json={"error": "Unauthorized"})
        return httpx.Response(200, text=page)


class StandInRouter:
    """The parts of litellm.Router the strategy touches, with LiteLLM 1.108.7's behaviour."""

    def __init__(self, hosts: list[str]) -> None:
        self.model_list = [
            {"model_name": MODEL, "model_info": {"id": f"berth-replica-{host}"},
             "litellm_params": {"model": f"hosted_vllm/{MODEL}", "api_base": f"http://{host}:8000/v1"}}
            for host in hosts]
        self.call_ids: list[str] = []  # of the calls routed through it, in order

    def set_custom_routing_strategy(self, strategy: Any) -> None:
        setattr(self, "get_available_deployment", strategy.get_available_deployment)  # noqa: B010 — as LiteLLM
        setattr(self, "async_get_available_deployment", strategy.async_get_available_deployment)  # noqa: B010

    async def async_get_available_deployment(self, model: str, request_kwargs: dict[str, Any],
                                             **_: Any) -> dict[str, Any]:
        return FALLBACK  # LiteLLM's own choice, reached only through the class

    def get_available_deployment(self, model: str, **_: Any) -> dict[str, Any]:
        return FALLBACK


@pytest.fixture
async def setup() -> AsyncIterator[tuple[PolicyRouting, StandInRouter, Engines]]:
    engines = Engines()
    strategy = PolicyRouting(MODEL, transport=httpx.MockTransport(engines.handle))
    router = StandInRouter(["a", "b"])
    strategy.install(router)  # type: ignore[arg-type]
    yield strategy, router, engines
    await strategy.aclose()


async def serve(strategy: PolicyRouting, engines: Engines, policy: str = "least_queue", **pages: str) -> None:
    engines.pages.update(pages)
    strategy.set_policy(policy)
    await strategy.follow({name: f"http://{name}:8000/v1" for name in ("a", "b")}, {"a": "key-a", "b": "key-b"})


async def picks(router: StandInRouter, count: int, headers: Mapping[str, str] | None = None,
                model: str = MODEL) -> list[str]:
    """The replica (host) of each of `count` routing calls made the way the proxy makes them."""
    chosen = []
    for _ in range(count):
        router.call_ids.append(next(CALL_IDS))
        request_kwargs = {"metadata": {"headers": dict(headers or {})}, "litellm_call_id": router.call_ids[-1]}
        deployment = await router.async_get_available_deployment(model=model, messages=[],
                                                                 specific_deployment=None,
                                                                 request_kwargs=request_kwargs)
        chosen.append("litellm" if deployment is FALLBACK else deployment["litellm_params"]["api_base"][7:8])
    return chosen


async def test_least_queue_picks_the_shorter_queue(setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, a=prometheus(running=4, waiting=6), b=prometheus(running=1))
    # Calls still in flight count on b's queue; at 10 a tie sends one to a.
    assert await picks(router, 9) == ["b"] * 9
    assert "a" in await picks(router, 3)
    for call_id in router.call_ids:  # LiteLLM reports every call's end (one twice, one unknown)
        strategy.finished(call_id)
    strategy.finished(router.call_ids[0])
    strategy.finished("never-routed")
    assert [replica.in_flight for replica in strategy.replicas.values()] == [0, 0]
    assert await picks(router, 3) == ["b"] * 3


async def test_queues_show_what_routing_has_read(setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    assert strategy.queues() == {}
    await serve(strategy, engines, a=prometheus(running=4, waiting=6))  # b refuses its scrape: not shown
    assert strategy.queues() == {"a": 10.0}
    await picks(router, 1)
    assert strategy.queues() == {"a": 11.0}  # plus the call in flight


async def test_a_call_whose_end_is_never_reported_stops_counting(
        setup: tuple[PolicyRouting, StandInRouter, Engines], monkeypatch: pytest.MonkeyPatch) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, a=prometheus(), b=prometheus())
    await picks(router, 4)
    assert sum(replica.in_flight for replica in strategy.replicas.values()) == 4
    monkeypatch.setattr(policy_routing, "CALL_FORGOTTEN_AFTER_S", 0.0)
    await serve(strategy, engines)  # the sync's next tick
    assert sum(replica.in_flight for replica in strategy.replicas.values()) == 0


async def test_a_session_sticks_to_its_replica(setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, a=prometheus(), b=prometheus())
    assert set(await picks(router, 6)) == {"a", "b"}  # equal queues share the load
    sticky = await picks(router, 6, {"X-Session-Id": "chat-42"})
    assert len(set(sticky)) == 1
    # LiteLLM also carries the headers under proxy_server_request; the same session lands alike.
    again = await router.async_get_available_deployment(
        model=MODEL, request_kwargs={"proxy_server_request": {"headers": {"x-session-id": "chat-42"}}})
    assert again["litellm_params"]["api_base"][7:8] == sticky[0]


async def test_a_replica_whose_scrape_failed_is_not_routed_to(
        setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, b=prometheus(running=5, waiting=5))  # a refuses its scrape
    assert await picks(router, 4) == ["b"] * 4
    assert await picks(router, 2, {"x-session-id": "anything"}) == ["b"] * 2
    # A replica scraped once but not for longer than the freshness window is out as well.
    strategy.replicas["http://b:8000/v1"].metrics.scraped_at = 0.0
    assert await picks(router, 2) == ["litellm"] * 2  # nothing eligible: LiteLLM's own choice


async def test_most_free_kv_lowest_ttft_and_round_robin(
        setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, "most_free_kv", a=prometheus(kv=0.2, ttft_sum=4, ttft_count=2),
                b=prometheus(kv=0.7, ttft_sum=1, ttft_count=2))
    assert await picks(router, 3) == ["a"] * 3
    strategy.set_policy("lowest_ttft")
    assert await picks(router, 3) == ["b"] * 3
    strategy.set_policy("round_robin")
    assert await picks(router, 4) == ["a", "b", "a", "b"]
    strategy.set_policy("no_such_policy")  # warned about; the default serves
    assert strategy.policy.name == "least_queue"


async def test_other_models_and_pinned_deployments_get_litellms_choice(
        setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, a=prometheus(), b=prometheus())
    assert await picks(router, 1, model="another/model") == ["litellm"]
    pinned = await router.async_get_available_deployment(model=MODEL, specific_deployment=True, request_kwargs={})
    assert pinned is FALLBACK
    assert router.get_available_deployment(model=MODEL, request_kwargs={}) is not FALLBACK  # the sync path


async def test_reinstalls_after_litellm_resets_its_router(
        setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    strategy, router, engines = setup
    await serve(strategy, engines, a=prometheus(), b=prometheus())
    del router.async_get_available_deployment, router.get_available_deployment  # routing_strategy_init
    assert await picks(router, 1) == ["litellm"]
    strategy.install(router)  # type: ignore[arg-type]
    assert await picks(router, 1) != ["litellm"]


async def test_prefix_affinity_routes_by_the_chat_and_a_failed_call_counts(
        setup: tuple[PolicyRouting, StandInRouter, Engines]) -> None:
    """LiteLLM hands the strategy the call's messages: a shared system prompt keeps the calls on one replica (the
    round robin of equal queues would alternate); LiteLLM's failure report is a failure lowest_failure weighs."""
    strategy, router, engines = setup
    await serve(strategy, engines, "prefix_affinity", a=prometheus(), b=prometheus())
    chosen = []
    for number in range(6):
        router.call_ids.append(next(CALL_IDS))
        messages = [{"role": "system", "content": "The shared instructions of one product. " * 20},
                    {"role": "user", "content": f"question {number}"}]
        deployment = await router.async_get_available_deployment(
            model=MODEL, messages=messages, specific_deployment=None,
            request_kwargs={"litellm_call_id": router.call_ids[-1]})
        chosen.append(deployment["litellm_params"]["api_base"][7:8])
        strategy.finished(router.call_ids[-1], failed=number == 5)
    assert len(set(chosen)) == 1
    failed = next(r for r in strategy.replicas.values() if r.copy_id == chosen[-1])
    assert failed.failures.count == 1.0 and failed.in_flight == 0
    assert set(await picks(router, 4)) == {"a", "b"}  # no messages: the load policy, equal queues in turn
