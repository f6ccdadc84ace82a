"""Issue 11, item 3: one request must not freeze the API. A body over the limit is refused at once with
413 (declared or streamed); an oversized catalog value is refused before anything parses it; while
large submissions are checked, the API keeps answering; an error never echoes a huge value back."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import httpx

from tests.security.conftest import People

MIB = 1024 * 1024
# A request the API must answer while submissions are being checked.
RESPONSIVE_S = 1.0


def _one_line(text: str, limit: int = 300) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < limit, text[:2000]
    return lines[0]


def _post(people: People, body: bytes | Iterator[bytes], person: str = "bob") -> httpx.Response:
    return httpx.post(people.stack.info["api_url"] + "/v1/workflows", content=body, timeout=60,
                      headers={"Authorization": f"Bearer {people.tokens[person]}",
                               "Content-Type": "application/json"})


def test_a_50_mb_body_is_refused_quickly_with_413(people: People) -> None:
    started = time.monotonic()
    response = _post(people, b"x" * (50 * MIB))
    assert response.status_code == 413, response.text[:500]
    assert "max_request_body_bytes" in _one_line(response.json()["detail"])
    assert time.monotonic() - started < 10


def test_a_streamed_body_without_length_is_cut_off_at_the_limit(people: People) -> None:
    # Chunked, no Content-Length: only counting the chunks as they arrive can refuse it.
    def chunks() -> Iterator[bytes]:
        for _ in range(800):  # 50 MiB
            yield b" " * 65536

    started = time.monotonic()
    response = _post(people, chunks())
    assert response.status_code == 413, response.text[:500]
    assert "max_request_body_bytes" in _one_line(response.json()["detail"])
    assert time.monotonic() - started < 10


def test_a_1_mb_extra_args_is_refused_quickly_in_one_line(people: People) -> None:
    started = time.monotonic()
    response = people.api("bob", "POST", "/v1/workflows",
                          json={"entry": "GPT-OSS 20B", "values": {"ExtraArgs": "--x 'a b' " * 90_000}})
    assert response.status_code == 400, response.text[:500]
    line = _one_line(response.json()["detail"])
    assert "ExtraArgs" in line and "4096" in line
    assert time.monotonic() - started < 5
    result = people.cli("bob", "workflow", "catalog", "start", "GPT-OSS 20B",
                        "--values", "ExtraEnv=" + "A=1 " * 2000)
    assert result.returncode != 0 and "ExtraEnv" in _one_line(result.stderr)


def test_the_api_keeps_answering_while_large_submissions_are_checked(people: People) -> None:
    # Allowed sizes (4 KiB values, a ~1 MB body) rendered and refused for capacity (8 GPUs per node on
    # 4-GPU nodes), and values a thousand times larger that used to hold the event loop for minutes. The allowed
    # values are words ExtraArgs' and ExtraEnv's allow-lists take (issue 29), repeated to the size limit.
    allowed = {"entry": "GPT-OSS 20B", "values": {"ExtraArgs": "--max-num-seqs 8 " * 240,
                                                  "ExtraEnv": "OMP_NUM_THREADS='x y' " * 185,
                                                  "GpusPerNode": 8}, "padding": "p" * (MIB - 16 * 1024)}
    oversized = {"entry": "GPT-OSS 20B", "values": {"ExtraArgs": "'a b' " * 150_000}}
    answers: list[int] = []

    def submit(body: dict[str, object]) -> None:
        for _ in range(3):
            answers.append(people.api("bob", "POST", "/v1/workflows", json=body).status_code)

    workers = [threading.Thread(target=submit, args=(body,)) for body in (allowed, oversized) * 3]
    for worker in workers:
        worker.start()
    slowest = 0.0
    health = people.stack.info["api_url"] + "/healthz"
    while any(worker.is_alive() for worker in workers):
        started = time.monotonic()
        assert httpx.get(health, timeout=30).status_code == 200
        slowest = max(slowest, time.monotonic() - started)
    for worker in workers:
        worker.join()
    assert sorted(set(answers)) == [400, 422], answers  # refused for size, and for capacity
    assert slowest < RESPONSIVE_S, f"/healthz took {slowest:.2f} s while submissions were checked"


def test_a_2_mb_entry_name_or_key_is_not_echoed(people: People) -> None:
    huge = "n" * (2 * MIB)
    refused = people.api("bob", "POST", "/v1/workflows", json={"entry": huge})
    assert refused.status_code == 413 and len(refused.text) < 400
    # Just under the body limit, the name reaches the catalog: its error stays short.
    for body in ({"entry": "n" * (MIB - 100)}, {"entry": "GPT-OSS 20B", "values": {"K" * (MIB - 100): "1"}},
                 {"entry": ["n" * (MIB - 100)]}, {"entry": "GPT-OSS 20B", "values": {"Model": "m" * 4000}}):
        response = people.api("bob", "POST", "/v1/workflows", json=body)
        assert 400 <= response.status_code < 500 and len(response.text) < 400, response.text[:400]
        _one_line(response.json()["detail"])
    lookup = people.api("bob", "GET", "/v1/catalog/entry", params={"name": "n" * 6000})
    assert lookup.status_code == 400 and len(lookup.text) < 400, lookup.text[:400]
