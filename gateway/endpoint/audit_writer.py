"""AuditWriter: the endpoint proxy's audit records, off the hot path. A request enqueues plain tuples (no
I/O, no validation: see docs/performance.md for the figure); a background task turns them into
`AuditRecord`s and posts them to the control plane in batches, which appends them to the hash chain
(server/store/audit.py). The rows in the store are what is durable; the queue is not.

Bounded memory: at most `capacity` records wait, and one batch that was posted without an answer. That batch is
posted again, whole and under its number, every tick until the API answers, before anything after it: the store
keeps a batch once (writer and number), so an answer lost after the append adds nothing twice. While it waits only
the queue grows; when the queue is full its oldest record is dropped, counted in `dropped` and logged in one line
per tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import ValidationError

from berth.contracts import AuditBatch, AuditPhase, AuditRecord
from berth.contracts.audit import ID_LENGTH, MAX_AUDIT_BATCH, RECORD_FIELDS
from berth.failure_log import FailureLog

log = logging.getLogger("berth.audit")

Post = Callable[[AuditBatch], Awaitable[Any]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
# What a request enqueues: (at, phase, request id, status, tokens in, tokens out, key id, user, endpoint id,
# copy id, latency ms), in AuditRecord's field order.
Pending = tuple[float, AuditPhase, str, int, int, int, str | None, str | None, str, str | None, float]


class AuditedRequest:
    """One request's facts as the proxy learns them; `watch(send)` notes the status it answers with."""

    __slots__ = ("_writer", "admitted", "copy_id", "endpoint_id", "key_id", "request_id", "started", "status",
                 "tokens_in", "tokens_out", "user")

    def __init__(self, writer: AuditWriter, request_id: str, endpoint_id: str) -> None:
        self._writer = writer
        self.request_id, self.endpoint_id = request_id, endpoint_id
        self.started = time.time()
        self.admitted = False
        self.status = 0  # none sent yet
        self.tokens_in = self.tokens_out = 0  # from the response's usage, where the proxy reads it
        self.key_id: str | None = None  # the API key's id, once keys are checked here
        self.user: str | None = None
        self.copy_id: str | None = None

    def admit(self, user: str | None) -> None:
        """The proxy accepted the request (the caller passed the endpoint's scope): record the ATTEMPT."""
        self.user, self.admitted = user, True
        self._writer.add((self.started, AuditPhase.ATTEMPT, self.request_id, 0, 0, 0, self.key_id, user,
                          self.endpoint_id, None, 0.0))

    def on_start(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer's head is leaving: its status is the record's."""
        self.status = message["status"]
        return message

    def watch(self, send: Send) -> Send:
        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self.status = message["status"]
            await send(message)
        return watched

    def end(self) -> None:
        """SUCCESS for a status below 400; FAILED for 400 and above, or when no status was sent (the client
        left first, or the proxy failed). A request refused before admission gets its ATTEMPT now."""
        if not self.admitted:
            self.admit(self.user)
        now = time.time()
        phase = AuditPhase.SUCCESS if 0 < self.status < 400 else AuditPhase.FAILED
        copy_id = self.copy_id[:ID_LENGTH] if self.copy_id else None
        self._writer.add((now, phase, self.request_id, self.status, self.tokens_in, self.tokens_out, self.key_id,
                          self.user, self.endpoint_id, copy_id, round((now - self.started) * 1000.0, 3)))


class AuditWriter:
    def __init__(self, post: Post, capacity: int = 10_000, batch_size: int = MAX_AUDIT_BATCH,
                 every_s: float = 0.5) -> None:
        self._post = post
        self.capacity, self.batch_size, self.every_s = capacity, batch_size, every_s
        self._queue: deque[Pending] = deque()
        self.dropped = 0  # records lost to a full queue since the proxy started
        self._dropped_logged = 0
        self.posted = 0
        self._prefix = uuid.uuid4().hex[:16]  # request ids unique across proxies, without a uuid per request
        self._numbers = itertools.count(1)
        self._batches = itertools.count(1)  # (prefix, number) names a batch to the store
        self._unanswered: AuditBatch | None = None  # posted, no answer yet: posted again as it is
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = FailureLog(log, "audit batch")

    def request(self, endpoint_id: str) -> AuditedRequest:
        return AuditedRequest(self, f"{self._prefix}-{next(self._numbers)}", endpoint_id[:ID_LENGTH])

    def add(self, pending: Pending) -> None:
        if len(self._queue) >= self.capacity:
            self._queue.popleft()
            self.dropped += 1
        self._queue.append(pending)
        if len(self._queue) >= self.batch_size:
            self._wake.set()

    def __len__(self) -> int:
        return len(self._queue) + (len(self._unanswered) if self._unanswered is not None else 0)

    def pending(self) -> list[Pending]:
        """What waits to be posted, oldest first (a copy)."""
        return list(self._queue)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def aclose(self, flush_within_s: float = 2.0) -> None:
        """Stop the task, then post what waits, for at most `flush_within_s` (a stopping proxy)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.flush(), flush_within_s)

    async def _run(self) -> None:
        while True:
            full = False
            with contextlib.suppress(TimeoutError):
                full = await asyncio.wait_for(self._wake.wait(), self.every_s)
            self._wake.clear()
            # Woken by a full batch: full batches only, the rest waits for the next one or the tick. Every post
            # costs the API a request (~1.5 ms of its CPU: authentication, a transaction), whatever its size.
            await self.flush(only_waiting=True, full_batches=full)
            if self.dropped > self._dropped_logged:
                log.warning("audit queue full (%d records): dropped the %d oldest record(s), %d since start",
                            self.capacity, self.dropped - self._dropped_logged, self.dropped)
                self._dropped_logged = self.dropped

    async def flush(self, only_waiting: bool = False, full_batches: bool = False) -> bool:
        """Post the batch still without an answer, then every waiting record in batches; False when a post failed
        (that batch is posted again first). `only_waiting`: the records that wait now, not those that arrive while
        they are posted — under load, posting until the queue is empty became a post every few records, back to
        back (each costing the API an authentication and a transaction: ~1 ms of the API's CPU per proxied
        request, on the same cores as the proxy); they wait for the next round, or for a full batch.
        `full_batches`: of those, only as many as fill whole batches."""
        waiting = len(self._queue)
        left = (waiting - waiting % self.batch_size if full_batches else waiting) if only_waiting else None
        while self._unanswered is not None or (self._queue and (left is None or left > 0)):
            if self._unanswered is None:
                count = min(self.batch_size, len(self._queue), left if left is not None else self.batch_size)
                if left is not None:
                    left -= count
                taken = [self._queue.popleft() for _ in range(count)]
                self._unanswered = as_batch(self._prefix, next(self._batches), taken)
            try:
                await self._post(self._unanswered)
            except Exception as error:  # noqa: BLE001 — whatever one post raises, the writer carries on
                self._failures.failed(error)
                return False
            self._failures.succeeded()
            self.posted += len(self._unanswered)
            self._unanswered = None
        return True


def as_batch(writer: str, number: int, taken: list[Pending]) -> AuditBatch:
    """The tuples as one batch, a column a field (no record object is made). A record that is not valid (it cannot
    be: fields are bounded when captured) is logged and left out rather than blocking every batch behind it."""
    try:
        columns = dict(zip(RECORD_FIELDS, zip(*taken, strict=True), strict=True))
        return AuditBatch.model_validate({"writer": writer, "number": number, **columns})
    except ValidationError:
        return AuditBatch.of(writer, number, as_records(taken))


def as_records(taken: list[Pending]) -> list[AuditRecord]:
    """The tuples as records; one that is not a valid record (it cannot be: fields are bounded when
    captured) is logged and left out rather than blocking every batch behind it."""
    records = []
    for pending in taken:
        try:
            records.append(AuditRecord.model_validate(dict(zip(RECORD_FIELDS, pending, strict=True))))
        except ValidationError as error:
            log.warning("audit record for request %s left out: %s", pending[2], error.errors()[0]["msg"])
    return records
