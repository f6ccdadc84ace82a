"""PoolFacts (berth/contracts/pool_facts.py) reads every endpoint row an older stack wrote and writes the same keys,
in the same order, as the dict it replaced."""

from __future__ import annotations

import json

from berth.contracts import PoolFacts

# An endpoint row's annotations as the stack before PoolFacts wrote them for a pool, with the keys others write
# beside the facts (a rollout's split, the autoscaler's explanation, a limits override).
WRITTEN_BEFORE = {"pool": True, "proxy": False, "routing_policy": "prefix_affinity", "min_replicas": 0,
                  "max_replicas": 3, "target_requests_per_s": 2.5, "target_concurrency": 0.0,
                  "scale_down_delay_s": 60.0, "scale_to_zero_after_s": 300.0, "scale_out_queue": 4.0,
                  "scale_out_s": 30.0, "scale_out_ttft_ms": 0.0, "scale_in_queue": 0.0, "scale_in_s": 120.0,
                  "max_context": 8192}
OTHER_KEYS = {"traffic": {"1": 100}, "scaling": {"reason": "idle"}, "limits": None, "key_max_ttl": 3600}


def test_an_old_row_reads_back_and_writes_the_same_bytes() -> None:
    facts = PoolFacts.from_annotations({**WRITTEN_BEFORE, **OTHER_KEYS})
    assert (facts.pool, facts.proxy, facts.routing_policy, facts.max_replicas, facts.max_context) == (
        True, False, "prefix_affinity", 3, 8192)
    assert facts.discoverable
    assert json.dumps(facts.as_annotations()) == json.dumps(WRITTEN_BEFORE)


def test_a_row_from_before_the_later_keys_reads_with_the_readers_defaults() -> None:
    facts = PoolFacts.from_annotations({"pool": True, "proxy": True, "routing_policy": "least_queue",
                                        "min_replicas": 1, "max_replicas": 2})
    assert (facts.scale_down_delay_s, facts.scale_to_zero_after_s, facts.scale_out_s, facts.scale_in_s) == (
        60.0, 300.0, 30.0, 120.0)
    assert facts.max_context is None and not facts.discoverable


def test_a_service_endpoint_has_no_facts() -> None:
    for stored in (None, {}, {"token_lapses_at": 1.0}):
        facts = PoolFacts.from_annotations(stored)
        assert not facts.pool and facts.routing_policy is None and not facts.discoverable
        assert facts.as_annotations() == {}


def test_a_value_of_the_wrong_type_reads_as_its_default() -> None:
    facts = PoolFacts.from_annotations({"pool": True, "max_replicas": "many", "max_context": True,
                                        "scale_in_s": 90})
    assert (facts.max_replicas, facts.max_context, facts.scale_in_s) == (1, None, 90.0)
