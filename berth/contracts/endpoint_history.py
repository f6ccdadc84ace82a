"""Endpoint history contracts (`GET /v1/endpoints/{endpoint_id}/history`): an endpoint's recent minutes as the
endpoint proxies counted them (requests, failures, tokens, latency quantiles) and the ready copies the autoscaler
saw. docs/console.md says where each figure comes from."""

from __future__ import annotations

from pydantic import Field

from berth.contracts.base import Response

STEP_S = 60  # one point a minute: the audit tallies' grain
DEFAULT_WINDOW_S = 3600
MIN_WINDOW_S = 300
MAX_WINDOW_S = 6 * 3600  # the ready-copy samples are kept this long; a longer look is `berth usage`'s (issue 34)


class HistoryPoint(Response):
    """One whole minute. Latency: of the requests answered below 400 that ended in it, from the proxy's accepting
    to its last byte, read from a histogram of ~19%-wide buckets (so within ~9%); None when none ended."""

    at: float  # the minute's start, Unix time
    requests: int = Field(ge=0)  # admitted by an endpoint proxy (the audit's ATTEMPT records)
    requests_per_s: float = Field(ge=0)  # requests / 60
    successes: int = Field(ge=0)  # ended below 400
    failures: int = Field(ge=0)  # ended at 400 or above, or without an answer
    tokens_in: int = Field(ge=0)
    tokens_out: int = Field(ge=0)
    p50_ms: float | None = None
    p99_ms: float | None = None
    # Ready copies taking requests, sampled once a minute by the autoscaler; None: not sampled (an endpoint with
    # no replica pool, or no autoscaler running then).
    ready_copies: int | None = None


class EndpointHistory(Response):
    """The whole answer: one point per whole minute of the window, oldest first (the current minute, not yet
    whole, is left out)."""

    endpoint_id: str
    window_s: int = Field(ge=MIN_WINDOW_S, le=MAX_WINDOW_S)
    step_s: int = STEP_S
    points: list[HistoryPoint]
