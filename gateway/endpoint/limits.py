"""The limits engine: admit a request under the cluster's LimitPolicy and its endpoint's override, or
refuse it with a `Refused` that names the limit and the scope; an admitted request holds a `Ticket` whose
`finish` charges its tokens and releases its concurrency slots. Counting is the `Counters`' job
(gateway/endpoint/counters.py: in memory; gateway/endpoint/redis_counters.py: shared through Redis).

The proxy reads a request once into an `Asked`; nothing here parses HTTP."""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from berth.contracts.limits import SCOPES, LimitPolicy
from gateway.edge.openai_errors import error_body
from gateway.endpoint.counters import DAY, IN_FLIGHT, MINUTE, REQUESTS, TOKENS, Check, Counters, window_left

PRIORITIES = {"low": 0.5, "normal": 1.0, "high": 2.0}  # x-request-priority: the shedding threshold's factor

_ERROR_TYPES = {429: "rate_limit_exceeded", 413: "invalid_request_error", 400: "invalid_request_error",
                503: "service_unavailable"}
_JSON = (b"content-type", b"application/json")
_PLAN_CACHE_SIZE = 1024  # overrides are one per endpoint: far more than a cluster has


@dataclass(slots=True)
class Asked:
    """What one request asks, read once by the proxy. Not frozen: one is made every request, and a frozen
    dataclass sets each of its fourteen fields through `object.__setattr__` (4× the time; nothing changes one)."""

    endpoint_id: str
    model: str | None = None
    user: str | None = None
    org: str | None = None
    groups: tuple[str, ...] = ()
    project: str | None = None  # x-project-id
    session: str | None = None  # x-session-id
    key_id: str | None = None
    key_tokens_per_minute: int | None = None  # the API key's own limits (its KeyVerdict)
    key_max_concurrent: int | None = None
    prompt_chars: int = 0
    max_tokens: int | None = None
    priority: str = "normal"  # x-request-priority: low|normal|high; anything else is refused (400)
    max_context: int | None = None  # the served MaxContextSize, when known


class Refused(Exception):
    """A request the limits refuse: 429 (a rate, a budget, load shedding), 413 (a size), 400 (a bad header),
    503 (the shared counters cannot be reached: closed, never counted twice or not at all)."""

    def __init__(self, status: int, limit: str, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.limit = limit
        self.message = message
        self.retry_after_s = retry_after_s
        self.priority_denied = False  # the request asked `high` without the grant (said in the answer)

    def body(self) -> bytes:
        """An OpenAI-style error body; `code` is the limit's name."""
        return error_body(self.message, _ERROR_TYPES.get(self.status, "invalid_request_error"), self.limit)

    def headers(self) -> list[tuple[bytes, bytes]]:
        if self.retry_after_s is None:
            return [_JSON]
        return [_JSON, (b"retry-after", str(self.retry_after_s).encode())]


def estimate_tokens(chars: int) -> int:
    """The prompt's token estimate: characters / 4, rounded up."""
    return (chars + 3) // 4


def check_priority(value: str | None) -> str:
    """An `x-request-priority` header's value (absent: normal), or a 400 naming the allowed values."""
    if value is None or value == "":
        return "normal"
    if value not in PRIORITIES:
        raise Refused(400, "priority", f"x-request-priority must be one of low, normal, high (got {value[:32]!r})")
    return value


@dataclass(frozen=True, slots=True)
class _Counted:
    """One counted limit of a plan: which scope, what it counts, the limit, and whether it counts per
    endpoint (set in the endpoint's override) or across the cluster."""

    scope: str
    kind: str
    limit: int
    window: int
    name: str  # the limit's name in a refusal
    per_endpoint: bool


@dataclass(frozen=True, slots=True)
class _Plan:
    policy: LimitPolicy
    scopes: tuple[tuple[str, tuple[_Counted, ...]], ...]  # the scopes with a counted limit, in check order
    needs_body: bool
    cache: dict[tuple[str, str, str], tuple[Check, ...]] = field(default_factory=dict)


def _plan(policy: LimitPolicy, override: LimitPolicy | None) -> _Plan:
    merged = policy.merged(override)
    counted: list[_Counted] = []
    fields = (("requests_per_minute", REQUESTS), ("tokens_per_minute", TOKENS), ("concurrent", IN_FLIGHT))
    for scope in SCOPES:
        limits = merged.scope(scope)
        for name, kind in fields:
            limit = getattr(limits, name)
            if limit is not None:
                window = 0 if kind == IN_FLIGHT else MINUTE
                own = override is not None and override.set_by(scope, name)
                counted.append(_Counted(scope, kind, limit, window, name, own))
    for scope, budget in (("user", "daily_tokens_per_user"), ("key", "daily_tokens_per_key")):
        limit = getattr(merged, budget)
        if limit is not None:
            own = override is not None and override.set_by(budget)
            counted.append(_Counted(scope, TOKENS, limit, DAY, "daily_tokens", own))
    # The body is parsed for the sizes, for the `model` it names when a model scope counts, and for the
    # estimate a token limit reserves (prompt + max_tokens).
    needs_body = (merged.max_prompt_tokens is not None or merged.max_tokens is not None
                  or bool(merged.context_check) or merged.model.any_set()
                  or any(item.kind == TOKENS for item in counted))
    scopes = tuple((scope, tuple(item for item in counted if item.scope == scope))
                   for scope in dict.fromkeys(item.scope for item in counted))
    return _Plan(merged, scopes, needs_body)


class Ticket:
    """An admitted request: `finish(tokens)` once it is answered (or failed, or its client left)."""

    __slots__ = ("_counters", "_charges", "_releases", "_id", "_done", "_clock", "_reserved", "_admitted_at")

    def __init__(self, counters: Counters, charges: tuple[Check, ...], releases: tuple[Check, ...],
                 ticket_id: str, clock: Callable[[], float] = time.time, reserved: int = 0,
                 admitted_at: float | None = None) -> None:
        self._clock = clock
        self._counters = counters
        self._charges = charges
        self._releases = releases
        self._id = ticket_id
        self._done = not charges and not releases
        self._reserved, self._admitted_at = reserved, admitted_at  # the tokens admission reserved, and when

    @property
    def finished(self) -> bool:
        return self._done

    async def finish(self, tokens: int) -> None:
        """Settle the TPM windows and daily budgets to `tokens` (the reservation given back or topped up) and
        release the concurrency slots; a second call does nothing, so it is safe in a `finally`."""
        if self._done:
            return
        self._done = True
        await self._counters.finish(self._charges, self._releases, self._id, max(0, tokens), self._clock(),
                                    self._reserved, self._admitted_at)


class Limiter:
    """Admits requests under one cluster policy and per-endpoint overrides, counting in `counters`."""

    def __init__(self, policy: LimitPolicy, counters: Counters, *, clock: Callable[[], float] = time.time) -> None:
        self.policy = policy
        self.counters = counters
        self.clock = clock  # epoch seconds: windows are epoch minutes and UTC days
        self._base = _plan(policy, None)
        self._plans: dict[int, tuple[LimitPolicy, _Plan]] = {}
        # Ticket ids unique across proxies (a shared in-flight set holds them) without a uuid per request.
        self._ticket_prefix = uuid.uuid4().hex[:16]
        self._ticket_numbers = itertools.count()

    def _plan_for(self, override: LimitPolicy | None) -> _Plan:
        if override is None:
            return self._base
        cached = self._plans.get(id(override))
        if cached is not None and cached[0] is override:
            return cached[1]
        if len(self._plans) >= _PLAN_CACHE_SIZE:
            self._plans.clear()
        plan = _plan(self.policy, override)
        self._plans[id(override)] = (override, plan)  # the override kept alive: its id stays its own
        return plan

    def granted_priority(self, asked: str | None, override: LimitPolicy | None = None) -> tuple[str, bool]:
        """(the priority a request runs at, whether it asked for more): `high` is the policy's to grant (an
        endpoint's override or the cluster's `high_priority`), not the caller's; anything unknown is a 400."""
        priority = check_priority(asked)
        if priority == "high" and not self._plan_for(override).policy.high_priority:
            return "normal", True
        return priority, False

    def needs_body(self, override: LimitPolicy | None = None) -> bool:
        """Whether a limit set needs the prompt or `max_tokens` (the proxy parses the JSON body only then)."""
        return self._plan_for(override).needs_body

    def body_limit(self, override: LimitPolicy | None = None) -> int | None:
        return self._plan_for(override).policy.body_limit_bytes

    def check_body(self, size: int, override: LimitPolicy | None = None) -> None:
        """Refuse (413) a body of `size` bytes above the body limit (Content-Length, or as read)."""
        limit = self._plan_for(override).policy.body_limit_bytes
        if limit is not None and size > limit:
            raise Refused(413, "body_limit_bytes", f"request body of {size} bytes is over the limit of "
                          f"{limit} bytes")

    async def admit(self, asked: Asked, override: LimitPolicy | None = None,
                    queue_depths: Sequence[float] = ()) -> Ticket:
        """A Ticket for `asked`, or Refused. Nothing is counted for a refused request."""
        plan = self._plan_for(override)
        policy = plan.policy
        factor = PRIORITIES.get(asked.priority)
        if factor is None:
            check_priority(asked.priority)  # raises: names the allowed values
            factor = 1.0
        if plan.needs_body:
            _check_sizes(policy, asked)
        if policy.shed_queue_depth is not None and queue_depths:
            threshold = policy.shed_queue_depth * factor
            if all(depth > threshold for depth in queue_depths):
                raise Refused(429, "shed_queue_depth", f"every copy of {asked.endpoint_id} is busy (queue depth "
                              f"above {threshold:g} for {asked.priority} priority); retry shortly", 1)
        checks = _checks(plan, asked)
        if not checks:
            return Ticket(self.counters, (), (), "")
        charges = tuple(check for check in checks if check.kind == TOKENS)
        # As OpenAI and LiteLLM do: the estimate (prompt + max_tokens) is reserved at admission, so that
        # concurrent requests cannot all pass a limit the first answers have not been charged to yet.
        reserve = estimate_tokens(asked.prompt_chars) + (asked.max_tokens or 0) if charges else 0
        for check in charges:
            if reserve > check.limit:
                raise Refused(429, check.key.split(":", 1)[0], f"request of about {reserve} tokens (prompt "
                              f"estimate + max_tokens) is over the limit of {check.limit} for "
                              f"{_label(check.key)}; lower max_tokens")
        ticket_id = f"{self._ticket_prefix}.{next(self._ticket_numbers)}"
        now = self.clock()
        refused = await self.counters.admit(checks, ticket_id, now, reserve)
        if refused >= 0:
            raise _refusal(checks[refused], now)
        releases = tuple(check for check in checks if check.kind == IN_FLIGHT)
        return Ticket(self.counters, charges, releases, ticket_id, self.clock, reserve, now)


def _check_sizes(policy: LimitPolicy, asked: Asked) -> None:
    prompt = estimate_tokens(asked.prompt_chars)
    if policy.max_prompt_tokens is not None and prompt > policy.max_prompt_tokens:
        raise Refused(413, "max_prompt_tokens", f"prompt of about {prompt} tokens (characters / 4) is over the "
                      f"limit of {policy.max_prompt_tokens}")
    if policy.max_tokens is not None and asked.max_tokens is not None and asked.max_tokens > policy.max_tokens:
        raise Refused(413, "max_tokens", f"max_tokens {asked.max_tokens} is over the limit of {policy.max_tokens}")
    if policy.context_check and asked.max_context is not None:
        wanted = prompt + (asked.max_tokens or 0)
        if wanted > asked.max_context:
            raise Refused(413, "context", f"prompt of about {prompt} tokens + max_tokens {asked.max_tokens or 0} "
                          f"is over the model's context of {asked.max_context} tokens")


_MEMBER_FIELDS = {"org": "org", "model": "model", "user": "user", "project": "project", "session": "session",
                  "key": "key_id"}
# Scope members whose checks are kept built (about 1 KB each): cleared when full, rebuilt on demand; small, so
# that a stranger's stream of new x-session-id values costs little (issue 29).
_CHECK_CACHE_SIZE = 4096


def _members(scope: str, asked: Asked) -> tuple[str, ...]:
    """Who the request is in scope `scope` (none: not counted there)."""
    if scope == "global":
        return ("*",)
    if scope == "group":
        return asked.groups
    value = getattr(asked, _MEMBER_FIELDS[scope])
    return (value,) if value else ()


def _member_checks(plan: _Plan, scope: str, counted: tuple[_Counted, ...], member: str,
                   endpoint: str) -> tuple[Check, ...]:
    """The checks of one member of one scope, built once and kept: building 25 checks per admit cost 27 µs
    of the 65 µs an admit took with every limit set; kept, 3 µs (bench/limits_admit.py: 12 µs in all)."""
    cache_key = (scope, member, endpoint)
    checks = plan.cache.get(cache_key)
    if checks is None:
        if len(plan.cache) >= _CHECK_CACHE_SIZE:
            plan.cache.clear()
        checks = tuple(Check(f"{item.name}:{scope}{'@' + endpoint if item.per_endpoint else ''}:{member}",
                             item.kind, item.limit, item.window) for item in counted)
        plan.cache[cache_key] = checks
    return checks


def _checks(plan: _Plan, asked: Asked) -> list[Check]:
    checks: list[Check] = []
    for scope, counted in plan.scopes:
        for member in _members(scope, asked):
            checks += _member_checks(plan, scope, counted, member, asked.endpoint_id)
    if asked.key_id and (asked.key_tokens_per_minute is not None or asked.key_max_concurrent is not None):
        cache_key = ("key!", asked.key_id, f"{asked.key_tokens_per_minute}/{asked.key_max_concurrent}")
        own = plan.cache.get(cache_key)
        if own is None:
            tokens, concurrent = asked.key_tokens_per_minute, asked.key_max_concurrent
            own = ((Check(f"tokens_per_minute:key:{asked.key_id}", TOKENS, tokens),) if tokens is not None else ()) \
                + ((Check(f"max_concurrent:key:{asked.key_id}", IN_FLIGHT, concurrent, 0),) if concurrent is not None
                   else ())
            plan.cache[cache_key] = own
        checks += own
    return checks


def _label(key: str) -> str:
    """Whom a check's key counts, for its refusal: the key is `limit:scope[@endpoint]:member`."""
    _, _, rest = key.partition(":")
    scope_part, _, member = rest.partition(":")
    scope, _, endpoint = scope_part.partition("@")
    within = f" on endpoint {endpoint}" if endpoint else ""
    if scope == "global":
        return f"all requests{within}" if endpoint else "all requests of the cluster"
    return f"{'API key' if scope == 'key' else scope} {member}{within}"


_WHAT = {"requests_per_minute": "requests per minute", "tokens_per_minute": "tokens per minute",
         "concurrent": "concurrent requests", "daily_tokens": "tokens per day",
         "max_concurrent": "concurrent requests"}  # the key's own (`berth key create --max-concurrent`)


def _refusal(check: Check, now: float) -> Refused:
    name = check.key.split(":", 1)[0]
    if check.kind == IN_FLIGHT:
        retry = 1  # a slot frees when any request in flight ends: worth trying again soon
    else:
        retry = window_left(now, check.window)
    who = _label(check.key)
    return Refused(429, name, f"limit of {check.limit} {_WHAT[name]} reached for {who}; retry in {retry} s", retry)
