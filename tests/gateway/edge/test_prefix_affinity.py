"""prefix_affinity (gateway/edge/prefix_affinity.py): chained prompt block hashes, the bounded index, a shared-prefix
series kept on one copy, the spill of an overloaded or stale preferred copy (pure functions, no processes)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from gateway.edge import prompt_key, routing
from gateway.edge.prefix_affinity import BLOCK_CHARS, MAX_BLOCKS, PrefixAffinity, PrefixIndex, prompt_blocks
from gateway.edge.replica import Replica, ReplicaMetrics

NOW = 1000.0
SYSTEM = "You are a careful assistant for the Berth operations manual. " * 40  # ~2.4 KB shared by a series


def replica(copy_id: str, *, running: float = 0, scraped_ago: float = 1.0, failed_ago: float | None = None,
            ) -> Replica:
    figures = ReplicaMetrics(running=running, scraped_at=NOW - scraped_ago,
                             failed_at=None if failed_ago is None else NOW - failed_ago)
    return Replica(copy_id=copy_id, url=f"http://{copy_id}", metrics=figures)


def chat(system: str, question: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def key(body: dict[str, Any]) -> routing.PromptKey:
    made = prompt_key.of_prompt(body, with_blocks=True)
    assert made is not None
    return made


def send(policy: routing.Policy, pool: list[Replica], body: dict[str, Any]) -> str:
    chosen = routing.choose(policy, pool, NOW, key(body))
    assert chosen is not None
    return chosen.copy_id


def test_block_hashes_are_chained_over_whole_blocks() -> None:
    one, two = "a" * BLOCK_CHARS, "b" * BLOCK_CHARS
    assert len(prompt_blocks(one + two + "tail shorter than a block")) == 2
    assert prompt_blocks(one + two)[0] == prompt_blocks(one + one)[0]
    assert prompt_blocks(one + two)[1] != prompt_blocks(two + two)[1]  # an equal block elsewhere is no match
    assert len(prompt_blocks("x" * BLOCK_CHARS * (MAX_BLOCKS + 50))) == MAX_BLOCKS  # bounded work per request
    assert prompt_blocks("short") == ()


def test_only_a_policy_that_reads_the_prompt_gets_its_blocks() -> None:
    body = chat(SYSTEM, "hello")
    assert prompt_key.of_prompt(body).blocks == ()  # type: ignore[union-attr]  # the other policies' path
    assert len(key(body).blocks) == len(SYSTEM) // BLOCK_CHARS
    assert prompt_key.of_prompt(body) == key(body)  # the same session key either way
    assert [routing.make(name).reads_prompt for name in routing.POLICIES].count(True) == 1


def test_a_shared_prefix_series_goes_to_one_copy() -> None:
    policy = routing.make("prefix_affinity")
    pool = [replica(name) for name in "abcd"]
    series = [send(policy, pool, chat(SYSTEM, f"question {n}")) for n in range(20)]
    assert len(set(series)) == 1
    other = "A different product's system prompt, long enough to span blocks. " * 40
    elsewhere = [send(policy, pool, chat(other, f"question {n}")) for n in range(20)]
    assert len(set(elsewhere)) == 1
    # Without a shared prefix the load policy (least_queue: equal queues in turn) spreads the requests.
    assert len({send(policy, pool, chat(f"{n} " + "x" * 300, "q")) for n in range(8)}) == 4


def test_the_longest_shared_prefix_wins() -> None:
    """a served the whole system prompt; b, since, a prompt sharing only its first blocks: a request with the whole
    prompt goes to a (the longer match), one sharing only the first blocks to b (the most recent holder)."""
    policy = PrefixAffinity(routing.LeastQueue())
    pool = [replica("a"), replica("b")]
    short = chat(SYSTEM[:BLOCK_CHARS * 4] + "then something else entirely. " * 20, "q")
    policy.index.served(key(chat(SYSTEM, "q")).blocks, "a")
    policy.index.served(key(short).blocks, "b")
    assert key(short).blocks[:3] == key(chat(SYSTEM, "q")).blocks[:3]
    assert send(policy, pool, chat(SYSTEM[:BLOCK_CHARS * 4] + "and a third ending. " * 10, "q")) == "b"
    assert send(policy, pool, chat(SYSTEM, "another question")) == "a"


def test_an_overloaded_preferred_copy_spills_to_the_load_policy() -> None:
    policy = routing.make("prefix_affinity")
    pool = [replica(name) for name in "abc"]
    home = send(policy, pool, chat(SYSTEM, "first"))
    preferred = next(r for r in pool if r.copy_id == home)
    preferred.in_flight = 6  # mean 2: within the margin of 4
    assert send(policy, pool, chat(SYSTEM, "second")) == home
    preferred.in_flight = 7  # mean 2.33: more than 4 above it
    spilled = send(policy, pool, chat(SYSTEM, "third"))
    assert spilled != home
    # The spill copy now holds the prefix too, and is the most recent: the series follows it while home is busy.
    assert send(policy, pool, chat(SYSTEM, "fourth")) == spilled


def test_a_stale_or_failed_preferred_copy_is_not_waited_for() -> None:
    policy = routing.make("prefix_affinity")
    pool = [replica("a"), replica("b")]
    home = send(policy, pool, chat(SYSTEM, "first"))
    preferred = next(r for r in pool if r.copy_id == home)
    preferred.metrics.failed_at = NOW  # its scrape failed after the last good one
    assert send(policy, pool, chat(SYSTEM, "second")) != home
    preferred.metrics.failed_at, preferred.metrics.scraped_at = None, NOW - 31  # stale
    assert send(policy, pool, chat(SYSTEM, "third")) != home


def test_a_session_header_wins_over_the_prefix() -> None:
    policy = routing.make("prefix_affinity")
    pool = [replica(name) for name in "abcd"]
    homes = Counter(routing.choose(policy, pool, NOW, f"session-{n}").copy_id  # type: ignore[union-attr]
                    for n in range(40))
    assert len(homes) > 1  # rendezvous hashing per session, not one prefix copy


def test_the_index_stays_within_its_bound_and_forgets_the_oldest() -> None:
    index = PrefixIndex(max_entries=100)
    first = prompt_blocks("first prompt " * 100)
    index.served(first, "a")
    for n in range(500):
        index.served(prompt_blocks(f"prompt {n} " * 60), f"copy-{n % 3}")
        assert len(index) <= 100
    assert index.longest(first, {"a"}) is None  # evicted
    recent = prompt_blocks("prompt 499 " * 60)
    assert index.longest(recent, {"copy-1"}) == "copy-1"
    assert index.longest(recent, {"copy-0"}) is None  # indexed to a copy not among the candidates


def test_a_request_without_a_prompt_takes_the_load_policy() -> None:
    policy = routing.make("prefix_affinity")
    pool = [replica("a", running=5), replica("b")]
    assert routing.choose(policy, pool, NOW).copy_id == "b"  # type: ignore[union-attr]
    assert prompt_key.of_prompt({"messages": "not a list"}, with_blocks=True) is None
