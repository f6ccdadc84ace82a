"""KeyGate: the endpoint proxy's check of a presented Berth API key (`bk_…`) and its per-key accounting.

Verdicts come from the control plane (`POST /v1/internal/keys/verify`) and are cached for at most
`verdict_ttl_s` (never past the secret's `valid_until`), so a revocation takes effect within seconds without
a round trip per request; refusals are cached as briefly, so a flood of bad keys costs the API one call per
key and window. The lifetime request quota is reserved from the API in batches (one at a time when few are
left: a batch another proxy holds is not spent elsewhere) and handed out one per request here.

A key's tokens per minute and concurrency are counted by the Limiter (gateway/endpoint/limits.py), in memory or
shared through Redis, with every other limit (gateway/endpoint/admission.py passes them on).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field

from berth.api_client import ApiClient
from berth.api_keys import model_refusal
from berth.bounded_parse import TooDeep, load_json
from berth.contracts import KeyVerdict, KeyVerifyRequest
from berth.errors import AuthenticationError, BerthError, NotFoundError, PermissionDeniedError
from berth.security import Identity
from gateway.edge.asgi import json_answer, replaying, whole_body
from gateway.edge.openai_errors import error_body
from gateway.edge.upstream import Receive, Send

VERDICT_TTL_S = 5.0
REFUSAL_TTL_S = 2.0
MAX_CACHED = 10_000
FIRST_BATCH = 32
# A key spending a batch within a second gets twice as many next time, up to this: at most this many
# requests, and never more than 1/16 of what the key has left, are lost if the proxy dies holding them.
MAX_BATCH = 512
# A keyed request whose body must be read here (its model, its max_tokens) may be this long: the body is
# held in memory to be relayed intact after.
MAX_READ_BODY = 1 << 20


# OpenAI's error type for each status a refusal answers with.
REFUSAL_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                 413: "invalid_request_error", 429: "too_many_requests", 503: "service_unavailable"}


class KeyRefusal(Exception):
    """Why a keyed request is refused, answered in OpenAI's error shape (`code` names the check or limit)."""

    def __init__(self, status: int, code: str, message: str, retry_after_s: float | None = None,
                 key_id: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.retry_after_s, self.key_id = retry_after_s, key_id

    def again(self) -> KeyRefusal:
        """A fresh copy of a cached refusal (one exception object raised many times grows its traceback)."""
        return KeyRefusal(self.status, self.code, self.message, self.retry_after_s, self.key_id)

    def body(self) -> bytes:
        return error_body(self.message, REFUSAL_KINDS.get(self.status, "invalid_request_error"), self.code)

    async def answer(self, send: Send) -> None:
        extra = [] if self.retry_after_s is None else [(b"retry-after", str(math.ceil(self.retry_after_s)).encode())]
        await json_answer(send, self.status, self.body(), extra)


def identity_of(verdict: KeyVerdict) -> Identity:
    """Whom a key speaks for: checked against scopes and asserted to the service like a token's caller."""
    return Identity(user=verdict.owner, groups=tuple(verdict.groups), org=verdict.org)


def check_model(verdict: KeyVerdict, requested: str | None) -> None:
    refusal = model_refusal(verdict.key_id, verdict.model, requested)
    if refusal is not None:
        raise KeyRefusal(403, "key_model", refusal, key_id=verdict.key_id)


@dataclass(frozen=True)
class KeyedRequest:
    """A request whose key passed: its verdict, whom it speaks for, and its body when it was read here (then
    `receive` hands it to the relay whole)."""

    verdict: KeyVerdict
    identity: Identity
    body: bytes | None
    receive: Receive


def requested_model(body: bytes) -> str | None:
    """The `model` a JSON body names (None: none, e.g. a listing); KeyRefusal 400 for a body not JSON, or nested
    too deep to parse."""
    if not body.strip():
        return None
    try:
        data = load_json(body, "The request body")
    except TooDeep as error:
        raise KeyRefusal(400, "nesting_depth", str(error)) from None
    except ValueError:
        raise KeyRefusal(400, "key_model", "This API key is scoped to one model: send a JSON body naming "
                         "its `model`.") from None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None


@dataclass
class _Quota:
    """Requests reserved from the API and not yet handed out; `left` is what the API had left after them."""

    reserved: int = 0
    left: int | None = None
    exhausted_until: float = 0.0  # refused without asking the API again until then
    batch: int = FIRST_BATCH  # the last reservation's size
    granted_at: float = 0.0  # when it was granted
    refilling: asyncio.Task[None] | None = None  # a reservation ahead of need, in flight
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class KeyGate:
    def __init__(self, api: ApiClient, verdict_ttl_s: float = VERDICT_TTL_S, refusal_ttl_s: float = REFUSAL_TTL_S,
                 max_cached: int = MAX_CACHED) -> None:
        self.api = api
        self.verdict_ttl_s, self.refusal_ttl_s, self.max_cached = verdict_ttl_s, refusal_ttl_s, max_cached
        self._verdicts: dict[tuple[str, str], tuple[KeyVerdict | KeyRefusal, float]] = {}
        self._quotas: dict[str, _Quota] = {}
        self._asking: dict[tuple[str, str], asyncio.Future[KeyVerdict | KeyRefusal]] = {}

    # --- who the key speaks for ---------------------------------------------------------------------
    async def verify(self, presented: str, endpoint_id: str) -> KeyVerdict:
        """The key's verdict for `endpoint_id` (its model checked apart, by `check_model`); KeyRefusal: 401
        unknown, revoked or expired; 403 for another endpoint; 503 the control plane cannot say."""
        cache_key = (presented, endpoint_id)
        cached = self._verdicts.get(cache_key)
        if cached is not None and cached[1] > time.time():
            if isinstance(cached[0], KeyRefusal):
                raise cached[0].again()
            return cached[0]
        # One question to the API per key at a time: when a busy key's verdict expires, its requests in
        # flight (32 at concurrency 32) wait for one answer instead of each asking.
        asking = self._asking.get(cache_key)
        if asking is None:
            asking = self._asking[cache_key] = asyncio.ensure_future(self._ask(presented, endpoint_id, cache_key))
            asking.add_done_callback(lambda _: self._asking.pop(cache_key, None))
        answer = await asyncio.shield(asking)
        if isinstance(answer, KeyRefusal):
            raise answer.again()
        return answer

    async def _ask(self, presented: str, endpoint_id: str, cache_key: tuple[str, str]) -> KeyVerdict | KeyRefusal:
        """The API's verdict on the key, remembered; a refusal is returned (raised by each waiter), not raised."""
        now = time.time()
        try:
            verdict = await self.api.verify_key(KeyVerifyRequest(key=presented, endpoint_id=endpoint_id, model=None))
        except (AuthenticationError, NotFoundError) as error:
            refusal = KeyRefusal(401, "invalid_api_key", str(error))
            self._remember(cache_key, refusal, now + self.refusal_ttl_s)
            return refusal
        except PermissionDeniedError as error:
            refusal = KeyRefusal(403, "key_endpoint", str(error))
            self._remember(cache_key, refusal, now + self.refusal_ttl_s)
            return refusal
        except BerthError as error:  # unreachable or failing: fail closed, and ask again next time
            return KeyRefusal(503, "key_check_unavailable", f"The API key cannot be checked now ({error}); "
                              "retry shortly.", retry_after_s=1)
        until = now + self.verdict_ttl_s
        if verdict.valid_until is not None:
            until = min(until, verdict.valid_until)
        self._remember(cache_key, verdict, until)
        return verdict

    async def check(self, presented: str, endpoint_id: str, receive: Receive) -> KeyedRequest:
        """Verify the key for this endpoint, and for a model-scoped key the body's `model`. The body is read
        (bounded) only when the key needs it: its model, or its `max_tokens` to charge a reply without usage."""
        verdict = await self.verify(presented, endpoint_id)
        body: bytes | None = None
        if verdict.model is not None or verdict.limits.tokens_per_minute is not None:
            body = await whole_body(receive, MAX_READ_BODY)
            if body is None:
                raise KeyRefusal(413, "request_too_large", f"The request body is over {MAX_READ_BODY} bytes.",
                                 key_id=verdict.key_id)
            receive = replaying(body, receive)
            if verdict.model is not None:
                check_model(verdict, requested_model(body))
        return KeyedRequest(verdict, identity_of(verdict), body, receive)

    def _remember(self, cache_key: tuple[str, str], answer: KeyVerdict | KeyRefusal, until: float) -> None:
        if len(self._verdicts) >= self.max_cached:
            now = time.time()
            self._verdicts = {k: v for k, v in self._verdicts.items() if v[1] > now}
            if len(self._verdicts) >= self.max_cached:
                self._verdicts.clear()  # a flood of distinct live keys: start over rather than grow
        self._verdicts[cache_key] = (answer, until)

    # --- the lifetime request quota -------------------------------------------------------------------
    async def spend(self, verdict: KeyVerdict) -> None:
        """Spend one request of the key's lifetime quota (called after every other check, so a request
        refused for another limit costs none); KeyRefusal 429 `request_quota`, or 503."""
        if verdict.limits.request_quota is not None:
            await self._spend_one(verdict)

    async def _spend_one(self, verdict: KeyVerdict) -> None:
        key_id, limits = verdict.key_id, verdict.limits
        quota = self._quotas.get(key_id)
        if quota is None:
            if len(self._quotas) >= self.max_cached:
                self._quotas = {k: q for k, q in self._quotas.items() if q.reserved}  # reserved ones are paid for
            assert limits.request_quota is not None
            quota = self._quotas[key_id] = _Quota(left=max(0, limits.request_quota - limits.requests_used))
        if not quota.reserved:
            async with quota.lock:  # one reservation in flight per key; the requests behind it share it
                if not quota.reserved:
                    await self._reserve(key_id, quota)
        quota.reserved -= 1
        # Half the batch spent: reserve the next one now, in the background, so that no request of a busy key
        # waits on the API (one in 32 did, ~5 ms, and the key's other requests queued behind it).
        if quota.reserved <= quota.batch // 2 and quota.refilling is None and (quota.left or 0) > 0:
            quota.refilling = asyncio.create_task(self._refill(key_id, quota))

    async def _refill(self, key_id: str, quota: _Quota) -> None:
        try:
            async with quota.lock:
                if quota.reserved <= quota.batch // 2:
                    await self._reserve(key_id, quota)
        except KeyRefusal:
            pass  # spent, or the API is down: the request that finds none left asks, and is answered, itself
        finally:
            quota.refilling = None

    async def _reserve(self, key_id: str, quota: _Quota) -> None:
        if quota.exhausted_until > time.monotonic():
            raise _exhausted(key_id)
        # Adaptive: a batch that lasted under a second doubles; what this proxy holds is spent nowhere else,
        # so never more than 1/16 of what is left (one at a time near the end).
        now = time.monotonic()
        wanted = min(MAX_BATCH, quota.batch * 2) if quota.granted_at and now - quota.granted_at < 1.0 else quota.batch
        batch = max(1, min(wanted, (quota.left or 0) // 16))
        try:
            reservation = await self.api.reserve_key_requests(key_id, batch)
        except BerthError as error:
            raise KeyRefusal(503, "key_check_unavailable", f"API key {key_id}'s request quota cannot be checked "
                             f"now ({error}); retry shortly.", 1, key_id) from None
        quota.left = reservation.remaining
        if reservation.granted <= 0:
            quota.exhausted_until = time.monotonic() + self.verdict_ttl_s
            raise _exhausted(key_id)
        quota.reserved += reservation.granted
        quota.batch, quota.granted_at = reservation.granted, now


def _exhausted(key_id: str) -> KeyRefusal:
    return KeyRefusal(429, "request_quota", f"API key {key_id} has used its whole request quota; create a new "
                      "key or ask for a larger quota.", key_id=key_id)
