"""RedisCounters: the limit counters several endpoint proxies and gateways share through one Redis
(`BERTH_REDIS_URL`). An admit is one round trip: a Lua script checks every scope and then counts them, all
or nothing, atomically for every proxy. Windowed counters are integers named by their window and expire
after two windows; an in-flight counter is a sorted set of the tickets holding a slot, scored by when they
were admitted (Redis's clock), so a proxy that dies holding slots loses them after `lease_s` instead of
forever, and a release (ZREM of its ticket) can never release twice.

Redis unreachable or failing: an admit is refused with a 503 (closed: never admitted uncounted), sent once
with no retry (a retried script could count twice); a finish that cannot reach it is logged once per
outage and dropped (its slots expire with the lease, its tokens go uncharged), never raised into the
request path. A caller cancelled mid-admit (its client left) gets its slots given back once Redis answers;
a finish runs to its end even when its caller is cancelled."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.endpoint.counters import IN_FLIGHT, TOKENS, Check, settle, window_index
from gateway.endpoint.limits import Refused

log = logging.getLogger(__name__)

# Longer than any request may be in flight (the upstream deadline is at most 300 s) with a margin.
DEFAULT_LEASE_S = 900.0

# KEYS: the counters. ARGV: lease (ms), ticket, the tokens to reserve, then per key its kind, limit and time
# to live (s).
_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease = tonumber(ARGV[1])
local ticket = ARGV[2]
local reserve = tonumber(ARGV[3])
for i = 1, #KEYS do
  local kind = ARGV[i * 3 + 1]
  local limit = tonumber(ARGV[i * 3 + 2])
  local used
  if kind == 'c' then
    redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - lease)
    used = redis.call('ZCARD', KEYS[i])
  else
    used = tonumber(redis.call('GET', KEYS[i]) or '0')
  end
  if used >= limit or (kind == 't' and used + reserve > limit) then return i end
end
for i = 1, #KEYS do
  local kind = ARGV[i * 3 + 1]
  if kind == 'r' then
    redis.call('INCR', KEYS[i])
    redis.call('EXPIRE', KEYS[i], tonumber(ARGV[i * 3 + 3]))
  elseif kind == 'c' then
    redis.call('ZADD', KEYS[i], now, ticket)
    redis.call('PEXPIRE', KEYS[i], lease)
  elseif reserve > 0 then
    redis.call('INCRBY', KEYS[i], reserve)
    redis.call('EXPIRE', KEYS[i], tonumber(ARGV[i * 3 + 3]))
  end
end
return 0
"""

# KEYS: the TOKENS counters, then the IN_FLIGHT sets. ARGV: how many TOKENS counters, then per counter the
# tokens to add (less its reservation: may be negative) and its ttl (s), then the ticket.
_FINISH = """
local charges = tonumber(ARGV[1])
for i = 1, #KEYS do
  if i <= charges then
    local amount = tonumber(ARGV[i * 2])
    if amount > 0 or (amount < 0 and redis.call('EXISTS', KEYS[i]) == 1) then
      redis.call('INCRBY', KEYS[i], amount)
      redis.call('EXPIRE', KEYS[i], tonumber(ARGV[i * 2 + 1]))
    end
  else
    redis.call('ZREM', KEYS[i], ARGV[#ARGV])
  end
end
return 0
"""


class RedisCounters:
    """Counters shared through the Redis at `url`; `prefix` keeps several clusters on one Redis apart."""

    def __init__(self, url: str, prefix: str = "berth:limits:", lease_s: float = DEFAULT_LEASE_S,
                 timeout_s: float = 1.0) -> None:
        self.url = url
        self.prefix = prefix
        self._lease_ms = int(lease_s * 1000)
        # No retry: a script sent again after a lost answer would count a request twice.
        self._redis = Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                     retry=Retry(NoBackoff(), 0), retry_on_timeout=False)
        self._admit = self._redis.register_script(_ADMIT)  # EVALSHA; loaded again after Redis restarts
        self._finish = self._redis.register_script(_FINISH)
        self._finish_failing = False
        self._background: set[asyncio.Future[None]] = set()  # releases of abandoned admits, kept referenced

    def _key(self, check: Check, now: float) -> str:
        if check.kind == IN_FLIGHT:
            return f"{self.prefix}{check.key}"
        return f"{self.prefix}{check.key}:{window_index(now, check.window)}"

    async def admit(self, checks: Sequence[Check], ticket: str, now: float, reserve: int = 0) -> int:
        keys = [self._key(check, now) for check in checks]
        args: list[str | int] = [self._lease_ms, ticket, reserve]
        for check in checks:
            args += [check.kind, check.limit, 2 * check.window]
        call = asyncio.ensure_future(self._admit(keys=keys, args=args))
        try:
            answer = await asyncio.shield(call)
        except asyncio.CancelledError:
            # The caller left (its client disconnected) with the script perhaps counted: once it answers,
            # give back the slots it took, so a request no one holds a ticket for holds no slot.
            releases = [check for check in checks if check.kind == IN_FLIGHT]
            call.add_done_callback(lambda done: self._release_abandoned(done, releases, ticket, now))
            raise
        except (RedisError, OSError) as error:
            raise Refused(503, "shared_counters", f"the shared limit counters (Redis) are unreachable "
                          f"({type(error).__name__}); retry shortly", 1) from None
        return int(answer) - 1

    def _release_abandoned(self, done: asyncio.Future[object], releases: list[Check], ticket: str,
                           now: float) -> None:
        if done.cancelled() or done.exception() is not None or done.result() != 0 or not releases:
            return
        task = asyncio.ensure_future(self.finish((), releases, ticket, 0, now))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def finish(self, charges: Sequence[Check], releases: Sequence[Check], ticket: str, tokens: int,
                     now: float, reserved: int = 0, admitted_at: float | None = None) -> None:
        # Shielded: a finish in the `finally` of a request whose client left still reaches Redis.
        await asyncio.shield(self._finish_now(charges, releases, ticket, tokens, now, reserved, admitted_at))

    async def _finish_now(self, charges: Sequence[Check], releases: Sequence[Check], ticket: str, tokens: int,
                          now: float, reserved: int, admitted_at: float | None) -> None:
        charged = [check for check in charges if check.kind == TOKENS]
        keys = [self._key(check, now) for check in charged] + [self._key(check, now) for check in releases]
        args: list[str | int] = [len(charged)]
        for check in charged:
            args += [settle(check, tokens, reserved, admitted_at, now), 2 * check.window]
        args.append(ticket)
        try:
            await self._finish(keys=keys, args=args)
        except (RedisError, OSError) as error:
            if not self._finish_failing:
                log.warning("limit counters: cannot reach Redis to finish a request (%s: %s); its tokens go "
                            "uncharged and its slots free after the %d s lease. Logged once per outage.",
                            type(error).__name__, error, self._lease_ms // 1000)
            self._finish_failing = True
            return
        self._finish_failing = False

    async def close(self) -> None:
        await self._redis.aclose()
