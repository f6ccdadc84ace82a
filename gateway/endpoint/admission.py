"""Admission: the limits step of the endpoint proxy for a caller it has already authenticated — read what
the request asks once (its headers; its JSON body only when a set limit needs the prompt or `max_tokens`),
admit it under the cluster's LimitPolicy and the endpoint's override (gateway/endpoint/limits.py), and hand back
the Ticket whose `finish` charges the answer's tokens and frees its concurrency slots.

One Limiter per proxy: counters in its memory, or shared with the other proxies through Redis when
`BERTH_REDIS_URL` is set (keyed and unkeyed requests alike fail closed, 503, when Redis cannot be reached).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from berth.bounded_parse import TooDeep, load_json
from berth.contracts import KeyVerdict, LimitPolicy
from berth.security import Identity
from berth.settings import ProxyLimits, limit_policy, redis_url
from gateway.edge.asgi import header, json_answer, replaying, whole_body
from gateway.edge.upstream import Receive, Send
from gateway.endpoint.counters import Counters, MemoryCounters
from gateway.endpoint.limits import Asked, Limiter, Refused, Ticket
from gateway.endpoint.route_table import Route

# x-project-id and x-session-id are counted per value: a member's name is bounded like any other.
MAX_MEMBER = 128
# The headers a limit reads: a priority asked for, and the project and session a request counts under.
ASKED_HEADERS = (b"x-request-priority", b"x-project-id", b"x-session-id")
# With the body limit turned off, a body read here for the prompt's size is still held in memory: bounded.
MAX_READ_BODY = 32 * 1024 * 1024


@dataclass(slots=True)
class Admitted:
    """An admitted request: its ticket, the `receive` to relay it from (its body replayed when it was read
    here), and that body (None: not read). Not frozen: one is made every request (as `Asked`)."""

    ticket: Ticket
    receive: Receive
    body: bytes | None
    priority_denied: bool = False  # asked `high` without the policy's grant: runs as normal, and says so


PRIORITY_DENIED = (b"x-berth-priority", b"normal; high is not granted to this endpoint")


def saying_priority_denied(send: Send) -> Send:
    """`send` with the answer's head carrying PRIORITY_DENIED."""
    async def sending(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), PRIORITY_DENIED]}
        await send(message)
    return sending


def limiter_from_settings() -> Limiter:
    """The cluster's limits (`BERTH_LIMITS_FILE`) counted in memory, or in Redis (`BERTH_REDIS_URL`)."""
    url = redis_url()
    if not url:
        return Limiter(limit_policy(), MemoryCounters())
    # Imported only when configured: the Redis client (with the OpenTelemetry metrics it loads) is ~0.2 s of CPU
    # at every proxy's start, and most proxies count in memory.
    from gateway.endpoint.redis_counters import RedisCounters

    counters: Counters = RedisCounters(url)
    return Limiter(limit_policy(), counters)


async def refuse(refused: Refused, send: Send) -> None:
    extra = [] if refused.retry_after_s is None else [(b"retry-after", str(refused.retry_after_s).encode())]
    if refused.priority_denied:
        extra.append(PRIORITY_DENIED)
    await json_answer(send, refused.status, refused.body(), extra)


class Admission:
    def __init__(self, limiter: Limiter) -> None:
        self.limiter = limiter
        self._exchange_limits: dict[int, tuple[ProxyLimits, LimitPolicy | None, ProxyLimits]] = {}

    def exchange_limits(self, base: ProxyLimits, override: LimitPolicy | None) -> ProxyLimits:
        """The deadlines' limits for a request (gateway/edge/exchange.py) with the body limit of the LimitPolicy
        (the cluster's, or the endpoint's override): one body limit, set in one place."""
        cached = self._exchange_limits.get(id(override))
        if cached is not None and cached[0] is base and cached[1] is override:
            return cached[2]
        limit = self.limiter.body_limit(override) or MAX_READ_BODY  # off: still bounded
        limits = base if limit == base.body_limit_bytes else dataclasses.replace(base, body_limit_bytes=limit)
        if len(self._exchange_limits) > 1024:
            self._exchange_limits.clear()
        self._exchange_limits[id(override)] = (base, override, limits)  # both kept alive: their ids stay theirs
        return limits

    async def aclose(self) -> None:
        close = getattr(self.limiter.counters, "close", None)  # Redis: its connection pool
        if close is not None:
            await close()

    async def admit(self, route: Route, headers: list[tuple[bytes, bytes]], identity: Identity | None,
                    verdict: KeyVerdict | None, body: bytes | None, receive: Receive) -> Admitted:
        """Admit the request (Refused: 429 a limit, 413 a size, 400 a bad header or a body nested too deep,
        503 counters down).
        `body`: the request body when the key check read it already."""
        limiter, override = self.limiter, route.limits
        # The body limit itself is the deadlines' (gateway/edge/exchange.py: declared, or counted as it streams);
        # here only a body read whole for a limit's sake is bounded by it.
        key_tokens = verdict is not None and verdict.limits.tokens_per_minute is not None  # it reserves an estimate
        if body is None and (key_tokens or limiter.needs_body(override)):
            size = header(headers, b"content-length")
            if size is not None and size.isdigit():
                limiter.check_body(int(size), override)  # refused before a byte of it is read
            limit = limiter.body_limit(override) or MAX_READ_BODY
            body = await whole_body(receive, limit)
            if body is None:
                raise Refused(413, "body_limit_bytes", f"request body is over the limit of {limit} bytes")
            receive = replaying(body, receive)
        elif body is not None:
            limiter.check_body(len(body), override)
        data = _json(body) if body is not None else {}  # parsed once, for every limit that reads it
        prompt_chars, max_tokens = _asks(data)
        asks_priority, project, session = _asked_headers(headers)
        priority, denied = limiter.granted_priority(asks_priority, override)
        asked = Asked(
            endpoint_id=route.id, model=_model(data, verdict), user=identity.user if identity else None,
            org=identity.org if identity else None, groups=tuple(identity.groups) if identity else (),
            project=_member(project), session=_member(session),
            key_id=verdict.key_id if verdict else None,
            key_tokens_per_minute=verdict.limits.tokens_per_minute if verdict else None,
            key_max_concurrent=verdict.limits.max_concurrent if verdict else None,
            prompt_chars=prompt_chars, max_tokens=max_tokens, priority=priority, max_context=route.max_context)
        # Load shedding reads each ready copy's queue: the requests its engine has waiting (vLLM's
        # num_requests_waiting, scraped every 2 s), not the ones it is running.
        depths = [copy.metrics.waiting for copy in route.pool if copy.ready and not copy.draining]
        try:
            ticket = await limiter.admit(asked, override, depths)
        except Refused as refused:
            refused.priority_denied = denied
            raise
        return Admitted(ticket, receive, body, denied)


def _asked_headers(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, str | None, str | None]:
    """x-request-priority, x-project-id and x-session-id as `header` reads each (the first, stripped, None when
    empty), in one pass over the request's headers instead of one each."""
    found: dict[bytes, str | None] = {}
    for name, value in headers:
        if name in ASKED_HEADERS and name not in found:
            found[name] = value.decode("latin-1").strip() or None
    priority, project, session = ASKED_HEADERS
    return found.get(priority), found.get(project), found.get(session)


def _member(value: str | None) -> str | None:
    return value[:MAX_MEMBER] if value else None


def _model(data: dict[str, Any], verdict: KeyVerdict | None) -> str | None:
    """The model the request names: the key's when it holds one (the key check compared them), else the
    body's when it was read."""
    if verdict is not None and verdict.model is not None:
        return verdict.model
    model = data.get("model")
    return model[:256] if isinstance(model, str) else None


def _json(body: bytes) -> dict[str, Any]:
    """The body's JSON object; {} for a body that is not one (the service answers it); Refused 400 for one
    nested too deep to parse."""
    try:
        data = load_json(body, "The request body") if body.strip() else {}
    except TooDeep as error:
        raise Refused(400, "nesting_depth", str(error)) from None
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _asks(data: dict[str, Any]) -> tuple[int, int | None]:
    """The prompt's characters (every message's text, or `prompt`) and `max_tokens` of an OpenAI body;
    (0, None) for a body that is not one (the service answers it)."""
    chars = 0
    messages = data.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            chars += _text_length(content)
    chars += _text_length(data.get("prompt"))
    wanted = data.get("max_tokens", data.get("max_completion_tokens"))
    max_tokens = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted >= 0 else None
    return chars, max_tokens


def _text_length(content: Any) -> int:
    """Characters of a message's content: a string, or a list of parts (`{"type": "text", "text": …}`) or of
    strings (a completion's `prompt` list)."""
    if isinstance(content, str):
        return len(content)
    if isinstance(content, list):
        total = 0
        for part in content:
            if isinstance(part, str):
                total += len(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                total += len(part["text"])
        return total
    return 0
