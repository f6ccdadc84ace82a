"""Routing rules that the endpoint proxy, LiteLLM's routing hook and the control plane's routing explanation all
apply: when a copy's scraped figures may be trusted, and which revisions a rollout's split sends traffic to.
Standard library only: it runs inside LiteLLM's virtualenv too."""

from __future__ import annotations

from collections.abc import Mapping

# A replica whose last successful scrape is older than this is not routed to: its figures may hide a
# replica that has stopped answering, and a failed scrape must never read as "idle".
FRESH_FOR_S = 30.0


def metrics_fresh(scraped_at: float | None, failed_at: float | None, now: float,
                  fresh_for_s: float = FRESH_FOR_S) -> bool:
    """Scraped successfully within the window, and no failure since (a failed scrape or connect keeps the copy
    out until a scrape succeeds again). Times on one clock, whichever the caller keeps."""
    if scraped_at is None or now - scraped_at > fresh_for_s:
        return False
    return failed_at is None or failed_at < scraped_at


def revision_weighted(weights: Mapping[int, int] | None, revision: int) -> bool:
    """Whether a rollout's split sends this revision any traffic: every revision while no split is set; under a
    split only those above 0 % (a blue-green new set before its switch, an old one after it, get none)."""
    return weights is None or weights.get(revision, 0) > 0
