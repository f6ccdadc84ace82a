"""The pool facts a start writes on its endpoint row (server/submission.py): the keys, order and values the
dict before PoolFacts wrote, so rows written before and after read alike."""

from __future__ import annotations

import json

from catalog.entry import find_entry
from catalog.render import render, resolve_values
from server.submission import pool_facts


def test_a_pool_s_facts_are_written_as_before() -> None:
    entry = find_entry("SmolLM2 135M Instruct")
    definition = render(entry, resolve_values(entry, {"Proxy": False, "MaxReplicas": 3}))
    written = pool_facts(definition).as_annotations()
    pool = definition.pool
    assert definition.replica is not None
    before = {"pool": True, "proxy": definition.proxy, "routing_policy": pool.routing_policy,
              "min_replicas": pool.min_replicas, "max_replicas": pool.max_replicas,
              "target_requests_per_s": pool.target_requests_per_s, "target_concurrency": pool.target_concurrency,
              "scale_down_delay_s": pool.scale_down_delay_s, "scale_to_zero_after_s": pool.scale_to_zero_after_s,
              "scale_out_queue": pool.scale_out_queue, "scale_out_s": pool.scale_out_s,
              "scale_out_ttft_ms": pool.scale_out_ttft_ms, "scale_in_queue": pool.scale_in_queue,
              "scale_in_s": pool.scale_in_s, "max_context": definition.replica.engine.max_model_len}
    assert json.dumps(written) == json.dumps(before)
    assert written["proxy"] is False and written["max_replicas"] == 3


def test_a_service_endpoint_gets_no_facts() -> None:
    entry = find_entry("LiteLLM Model Gateway")
    assert pool_facts(render(entry, resolve_values(entry, {}))).as_annotations() == {}
