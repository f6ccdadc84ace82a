"""The chaos soak's checkers on hand-made observations: each invariant flags what it must and only that,
so a soak that reports 0 has looked (tests/e2e/test_chaos_smoke.py runs them on a real stack)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.chaos import invariants
from bench.chaos.invariants import InvariantMonitor, RankProcess, ended_by_event
from bench.chaos.load import LoadTally, Target, plain_request, stream_request
from bench.chaos.monkey import KINDS, ChaosMonkey

WORKFLOW = "vllm-0001"


@pytest.fixture
def monitor(tmp_path: Path) -> InvariantMonitor:
    return InvariantMonitor(tmp_path, "http://127.0.0.1:9", "token", [WORKFLOW])


def test_two_live_ranks_on_one_gpu_are_a_double_reservation(monitor: InvariantMonitor) -> None:
    ranks = [RankProcess(10, "node-1", "vllm-0001.copy-0-r0", (0, 1)),
             RankProcess(11, "node-1", "vllm-0002.copy-0-r0", (1,)),
             RankProcess(12, "node-2", "vllm-0003.copy-0-r0", (1,))]  # same index, another node: fine
    monitor._check_processes(ranks, {}, {})
    assert list(monitor.double_reserved) == ["node-1/gpu1"]
    assert monitor.summary()["gpus_reserved_twice"] == 1


def test_a_rank_on_a_gpu_reserved_for_another_copy_counts_only_when_both_reads_agree(
        monitor: InvariantMonitor) -> None:
    rank = [RankProcess(10, "node-1", "vllm-0001.copy-0-r0", (2,))]
    monitor._check_processes(rank, {("node-1", 2): "vllm-0001.copy-0"}, {("node-1", 2): "vllm-0001.copy-0"})
    monitor._check_processes(rank, {("node-1", 2): "vllm-0009.copy-1"}, {})  # released between the reads
    assert not monitor.double_reserved
    monitor._check_processes(rank, {("node-1", 2): "vllm-0009.copy-1"}, {("node-1", 2): "vllm-0009.copy-1"})
    assert monitor.double_reserved["node-1/gpu2"]["holders"] == ["vllm-0001.copy-0-r0"]


def _described(copies: list[str], events: list[dict[str, Any]], phase: str = "ready") -> dict[str, Any]:
    return {"phase": phase, "replicas": [{"copy_id": c} for c in copies], "events": events}


def test_a_copy_that_vanishes_without_an_ending_event_is_lost(monitor: InvariantMonitor) -> None:
    monitor._check_workflow(WORKFLOW, _described(["c-0", "c-1"], []))
    ready_only = [{"kind": "copy_ready", "copy_id": "c-1"}]
    monitor._check_workflow(WORKFLOW, _described(["c-0"], ready_only))
    assert not monitor.lost_copies  # within the grace: its event may still come
    monitor._vanished[(WORKFLOW, "c-1")] -= invariants.EVENT_GRACE_S + 1
    monitor._check_workflow(WORKFLOW, _described(["c-0"], ready_only))
    assert monitor.lost_copies == [{"workflow_id": WORKFLOW, "copy_id": "c-1", "phase": "ready"}]


def test_a_copy_that_ends_with_its_event_is_not_lost_and_a_failed_phase_counts(monitor: InvariantMonitor) -> None:
    monitor._check_workflow(WORKFLOW, _described(["c-0"], []))
    monitor._check_workflow(WORKFLOW, _described([], [{"kind": "copy_interrupted", "copy_id": "c-0"}], "failed"))
    assert not monitor.lost_copies and not monitor._vanished
    assert monitor.summary()["workflows_failed"] == 1
    assert ended_by_event([{"kind": "failed", "copy_id": None}], "c-7")
    assert not ended_by_event([{"kind": "copy_failed", "copy_id": "c-8"}], "c-7")


@pytest.mark.parametrize(("body", "outcome"), [
    (b'data: {"choices": []}\n\ndata: [DONE]\n\n', "done"),
    (b'data: {"choices": []}\n\ndata: {"error": {"type": "upstream_error"}}\n\n', "error_event"),
    (b'data: {"choices": []}\n\n', "broken"),
])
def test_a_stream_is_broken_only_without_done_and_without_an_error_event(body: bytes, outcome: str) -> None:
    import httpx

    transport = httpx.MockTransport(lambda _request: httpx.Response(200, content=body))
    tally = LoadTally()
    with httpx.Client(transport=transport) as client:
        stream_request(client, Target("pool", "http://endpoint", "t", "m"), tally)
    assert dict(tally.streams) == {outcome: 1}
    assert tally.summary()["streams_broken_without_error_event"] == (1 if outcome == "broken" else 0)


def test_a_503_with_retry_after_is_a_failure_counted_on_its_own() -> None:
    import httpx

    answers = iter([httpx.Response(200, json={}), httpx.Response(503, headers={"Retry-After": "1"}),
                    httpx.Response(503)])
    tally = LoadTally()
    with httpx.Client(transport=httpx.MockTransport(lambda _request: next(answers))) as client:
        for _ in range(3):
            plain_request(client, Target("proxy_true", "http://endpoint", "t", "m"), tally)
    summary = tally.summary()
    assert summary["non_streamed_success_rate"] == round(1 / 3, 5)
    assert summary["non_streamed_503_retry_after"] == 1 and summary["non_streamed_failures"]["http_503"] == 1


def test_the_seed_fixes_the_kill_sequence_and_every_kind_comes_up(tmp_path: Path) -> None:
    def deck(seed: int) -> list[str]:
        monkey = ChaosMonkey(tmp_path, seed)
        return [monkey._next_kind() for _ in range(len(KINDS))]

    assert deck(1212) == deck(1212) != deck(1213)
    assert sorted(deck(1212)) == sorted(KINDS)
    kill = ChaosMonkey(tmp_path, 1).kill_one(3.0)  # nothing runs under an empty state dir: skipped
    assert kill.pid is None


def test_targets_are_named_and_drawn_by_role_not_by_workflow_id(tmp_path: Path) -> None:
    for workflow_id, pid in (("vllm-ffff", 101), ("vllm-0000", 102)):
        run = tmp_path / "nodes" / "node-1" / "ranks" / f"{workflow_id}.copy-0-r0"
        run.mkdir(parents=True)
        (run / "rank.json").write_text(f'{{"pid": {pid}}}')
    monkey = ChaosMonkey(tmp_path, 1, labels={"vllm-ffff": "a_pool", "vllm-0000": "b_copy"})
    assert monkey.candidates("rank") == [("a_pool.copy-0-r0", 101), ("b_copy.copy-0-r0", 102)]


def test_only_streams_aborted_while_the_proxy_died_are_set_apart() -> None:
    from bench.chaos.soak import _streams_cut_by_the_proxys_death

    proxy_kill = {"at_s": 10.0, "kind": "proxy", "target": "proxy", "pid": 1}
    rank_kill = {"at_s": 20.0, "kind": "rank", "target": "pool.copy-0-r0", "pid": 2}
    samples = [
        {"target": "a", "ending": "aborted (RemoteProtocolError)", "kills_meanwhile": [proxy_kill]},  # cut
        {"target": "b", "ending": "aborted (RemoteProtocolError)", "kills_meanwhile": [rank_kill]},  # broken
        {"target": "c", "ending": "clean", "kills_meanwhile": [proxy_kill]},  # a clean end: broken whatever died
    ]
    load = {"streams": {"done": 7, "broken": 3}, "streams_broken_without_error_event": 3,
            "broken_stream_samples": samples}
    result = _streams_cut_by_the_proxys_death(load)
    assert result["streams"] == {"done": 7, "broken": 2, "aborted_as_the_proxy_died": 1}
    assert result["streams_broken_without_error_event"] == 2
    assert [s["target"] for s in result["broken_stream_samples"]] == ["b", "c"]
    assert [s["target"] for s in result["stream_samples_aborted_as_the_proxy_died"]] == ["a"]


def test_requests_lost_inside_the_killed_proxy_are_counted_beside_the_raw_rate() -> None:
    from bench.chaos.soak import _requests_in_the_killed_proxy

    proxy_kill = {"at_s": 10.0, "kind": "proxy", "target": "proxy", "pid": 1}
    rank_kill = {"at_s": 20.0, "kind": "rank", "target": "pool.copy-0-r0", "pid": 2}
    samples = [
        {"outcome": "transport_RemoteProtocolError", "kills_meanwhile": [proxy_kill]},  # held by the dead proxy
        {"outcome": "http_500", "kills_meanwhile": [proxy_kill]},  # an answer: not the proxy's death
        {"outcome": "transport_ReadError", "kills_meanwhile": [rank_kill]},
    ]
    load = {"non_streamed_total": 1000, "non_streamed_ok": 997, "non_streamed_success_rate": 0.997,
            "non_streamed_failure_samples": samples}
    result = _requests_in_the_killed_proxy(load)
    assert result["non_streamed_lost_in_the_killed_proxy"] == 1
    assert result["non_streamed_success_rate_besides_the_killed_proxy"] == round(997 / 999, 5)
    assert result["non_streamed_success_rate"] == 0.997  # the raw rate, which the bench's goal is judged on


def test_the_success_bound_is_judged_on_the_rate_it_is_given() -> None:
    from bench.chaos.soak import verdicts

    result = {"copies_lost_without_event": 0, "gpus_reserved_twice": 0, "orphans_after_down": 0,
              "workflows_failed": 0, "streams_broken_without_error_event": 0, "non_streamed_success_rate": 0.9871,
              "non_streamed_success_rate_besides_the_killed_proxy": 0.99677}
    assert not verdicts(result, 0.99)["non_streamed_success_rate"]  # the raw rate by default (the bench)
    assert verdicts(result, 0.99, "non_streamed_success_rate_besides_the_killed_proxy")["non_streamed_success_rate"]
    assert not verdicts({**result, "non_streamed_success_rate_besides_the_killed_proxy": None}, 0.99,
                        "non_streamed_success_rate_besides_the_killed_proxy")["non_streamed_success_rate"]


def test_with_rounds_every_kind_is_killed_and_one_with_nothing_running_is_drawn_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.chaos import monkey as monkey_module

    killed: list[int] = []
    monkeypatch.setattr(monkey_module, "alive", lambda pid: True)
    monkeypatch.setattr(monkey_module.os, "kill", lambda pid, _signal: killed.append(pid))
    monkey = ChaosMonkey(tmp_path, 1212, rounds=1)
    first = monkey._next_kind()
    monkey._deck.append(first)  # put back on top: the first kill draws it
    looked: list[str] = []

    def candidates(kind: str) -> list[tuple[str, int]]:
        looked.append(kind)
        if kind == first and looked.count(kind) == 1:
            return []  # nothing of the first kind running, the first time
        return [(kind, 100 + KINDS.index(kind))]

    monkeypatch.setattr(monkey, "candidates", candidates)
    kills: list[Any] = []
    while not monkey.finished:
        assert len(kills) <= len(KINDS), kills
        kills.append(monkey.kill_one(float(len(kills))))
    assert kills[0].pid is None and kills[-1].kind == kills[0].kind  # skipped, then drawn again last
    assert sorted(k.kind for k in kills[1:]) == sorted(KINDS) and len(killed) == len(KINDS)
    assert monkey.last_kill_at == len(KINDS) and monkey.summary()["kills"] == len(KINDS)
    assert not ChaosMonkey(tmp_path, 1212).finished  # without rounds: kills until the soak ends


def test_a_target_serves_again_only_with_both_kinds_of_request_begun_after_the_moment() -> None:
    tally, target = LoadTally(), Target("pool", "http://endpoint", "t", "m")
    tally.count_plain(target, "ok", 5.0, 5.1)
    tally.count_stream(target, "done", began=4.0)
    assert not tally.served_after([target], 4.5)  # the stream began before
    tally.count_stream(target, "broken", {}, began=6.0)
    assert not tally.served_after([target], 4.5)  # a broken stream does not count
    tally.count_stream(target, "done", began=6.0)
    tally.count_plain(target, "http_500", 7.0, 7.1)
    assert tally.served_after([target], 4.5) and not tally.served_after([target], 5.5)
