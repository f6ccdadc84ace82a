"""Steady client load for the chaos soak: one paced thread per endpoint sending non-streamed chat requests and,
every Nth (every 2nd by default), a streamed one; each request counted once (no retries), each outcome classified."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

MAX_TOKENS = 24
# The client waits as long as the endpoint proxy may hold a request (gateway/endpoint/hold.py's 120 s,
# after which it answers 503 itself) — shorter than the OpenAI SDK's 600 s. A request held while a
# killed LiteLLM and the control plane come back is a success, late: the latency figures show how late.
TIMEOUT = httpx.Timeout(130.0, connect=5.0)


@dataclass(frozen=True)
class Target:
    """One endpoint under load: where it is, how to get in, which model it serves."""

    name: str
    url: str
    token: str
    model: str


@dataclass
class LoadTally:
    """Every request's outcome, counted once. Non-streamed: `ok` (2xx) or the failure kind. Streamed:
    `done` ([DONE] seen), `error_event` (an SSE `error` event, i.e. reported), `refused` (no 200, so no
    stream began), `broken` (a 200 stream that ended without [DONE] and without an error event)."""

    plain: Counter[str] = field(default_factory=Counter)
    failures_by_target: Counter[str] = field(default_factory=Counter)
    streams: Counter[str] = field(default_factory=Counter)
    broken_samples: list[dict[str, Any]] = field(default_factory=list)
    plain_seconds: list[float] = field(default_factory=list)  # each successful non-streamed request's time
    failed_samples: list[dict[str, Any]] = field(default_factory=list)  # non-streamed failures, named by time
    # (target, "non_streamed" or "stream") → when the latest request that succeeded began (monotonic)
    served_since: dict[tuple[str, str], float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count_plain(self, target: Target, outcome: str, began: float, ended: float) -> None:
        with self.lock:
            self.plain[outcome] += 1
            if outcome == "ok":
                self.plain_seconds.append(ended - began)
                self._served(target, "non_streamed", began)
                return
            self.failures_by_target[f"{target.name}: {outcome}"] += 1
            if len(self.failed_samples) < 50:
                self.failed_samples.append({"target": target.name, "outcome": outcome,
                                            "began_mono": began, "ended_mono": ended})

    def count_stream(self, target: Target, outcome: str, sample: dict[str, Any] | None = None,
                     began: float | None = None) -> None:
        with self.lock:
            self.streams[outcome] += 1
            if outcome == "done" and began is not None:
                self._served(target, "stream", began)
            elif outcome != "done":
                self.failures_by_target[f"{target.name}: stream {outcome}"] += 1
            if sample is not None and len(self.broken_samples) < 20:
                self.broken_samples.append(sample)

    def _served(self, target: Target, how: str, began: float) -> None:
        key = (target.name, how)
        self.served_since[key] = max(began, self.served_since.get(key, began))

    def non_streamed_total(self) -> int:
        with self.lock:
            return sum(self.plain.values())

    def served_after(self, targets: list[Target], moment: float) -> bool:
        """Whether every target has answered both a non-streamed and a streamed request that began after
        `moment` (monotonic): each endpoint serves again, end to end."""
        with self.lock:
            return all(self.served_since.get((t.name, how), moment) > moment
                       for t in targets for how in ("non_streamed", "stream"))

    def summary(self) -> dict[str, Any]:
        with self.lock:
            total = sum(self.plain.values())
            return {
                "non_streamed_total": total,
                "non_streamed_ok": self.plain["ok"],
                "non_streamed_success_rate": round(self.plain["ok"] / total, 5) if total else None,
                "non_streamed_failures": {k: v for k, v in sorted(self.plain.items()) if k != "ok"},
                "non_streamed_503_retry_after": self.plain["503_retry_after"],
                "non_streamed_ok_seconds": _quantiles(self.plain_seconds),
                "failures_by_endpoint": dict(sorted(self.failures_by_target.items())),
                "streams_total": sum(self.streams.values()),
                "streams": dict(sorted(self.streams.items())),
                "streams_broken_without_error_event": self.streams["broken"],
                "broken_stream_samples": list(self.broken_samples),
                "non_streamed_failure_samples": list(self.failed_samples),
            }


def _quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
    return {"p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1], 3), "over_30_s": sum(v > 30 for v in values)}


def _body(target: Target, stream: bool) -> dict[str, Any]:
    return {"model": target.model, "max_tokens": MAX_TOKENS, "stream": stream,
            "messages": [{"role": "user", "content": "chaos soak: say something"}]}


def plain_request(client: httpx.Client, target: Target, tally: LoadTally) -> None:
    started = time.monotonic()
    try:
        response = client.post(target.url + "/v1/chat/completions", json=_body(target, False),
                               headers={"Authorization": f"Bearer {target.token}"})
    except httpx.HTTPError as error:
        tally.count_plain(target, f"transport_{type(error).__name__}", started, time.monotonic())
        return
    if response.is_success:
        outcome = "ok"
    elif response.status_code == 503 and "retry-after" in response.headers:
        outcome = "503_retry_after"  # a failure too: the client had to come back later
    else:
        outcome = f"http_{response.status_code}"
    tally.count_plain(target, outcome, started, time.monotonic())


def _is_error_event(payload: str) -> bool:
    try:
        data = json.loads(payload)
    except ValueError:
        return False
    return isinstance(data, dict) and "error" in data


def stream_request(client: httpx.Client, target: Target, tally: LoadTally) -> None:
    """A streamed request: a 200 stream must end with [DONE] or carry an error event, however it ends."""
    done = errored = False
    ending = "clean"
    started = time.monotonic()
    try:
        with client.stream("POST", target.url + "/v1/chat/completions", json=_body(target, True),
                           headers={"Authorization": f"Bearer {target.token}"}) as response:
            if response.status_code != 200:
                response.read()
                tally.count_stream(target, "refused")
                return
            try:
                for line in response.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        done = True
                    elif _is_error_event(payload):
                        errored = True
            except httpx.HTTPError as error:
                ending = f"aborted ({type(error).__name__})"
    except httpx.HTTPError:
        tally.count_stream(target, "refused")  # no response at all: nothing was streamed
        return
    if done:
        tally.count_stream(target, "done", began=started)
    elif errored:
        tally.count_stream(target, "error_event")
    else:
        tally.count_stream(target, "broken", {"target": target.name, "ending": ending,
                                              "began_mono": started, "ended_mono": time.monotonic()})


def drive(targets: list[Target], rate_per_s: float, stop: threading.Event, tally: LoadTally,
          stream_every: int = 2) -> list[threading.Thread]:
    """Start one paced thread per target; together they send `rate_per_s` requests a second, every
    `stream_every`-th of a thread's requests streamed (2: alternating). Pacing, not synchronization: a
    request that takes longer than its slot delays only its own thread. One thread per target keeps one
    request per target in flight at a time: a killed endpoint proxy holds at most one per target."""
    interval = len(targets) / rate_per_s
    threads = []
    for index, target in enumerate(targets):
        thread = threading.Thread(target=_loop, args=(target, interval, index * interval / len(targets), stream_every,
                                                      stop, tally), name=f"load-{target.name}", daemon=True)
        thread.start()
        threads.append(thread)
    return threads


def _loop(target: Target, interval: float, offset: float, stream_every: int, stop: threading.Event,
          tally: LoadTally) -> None:
    sent = 0
    next_at = time.monotonic() + offset
    with httpx.Client(timeout=TIMEOUT) as client:
        while not stop.wait(max(0.0, next_at - time.monotonic())):
            next_at += interval
            sent += 1
            (stream_request if sent % stream_every == 0 else plain_request)(client, target, tally)
