"""Sites and failure domains (issue 36): the words a node's site and failure domain are, the labels a node agent
reports them under, and the rules placement and routing both apply to them — whether a site is within a residency
or a list of allowed sites, and how a copy's site ranks for `site_local` routing. Standard library only."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

# A node's inventory labels carry its site and failure domain under these keys. Labels rather than typed fields:
# the agent already reports labels and the store already keeps them, so no schema migration, and an agent or API
# of either age reads the other's heartbeats. The values are checked as SITE_WORD at each heartbeat.
SITE_LABEL = "berth.site"
FAILURE_DOMAIN_LABEL = "berth.failure-domain"

# A site, failure domain or residency: a word safe in a label, a URL and a log line.
SITE_WORD = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
SITE_PATTERN = re.compile(rf"^{SITE_WORD}\Z")
# A comma-separated list of them (AllowedSites, FailoverSites), at most 16.
SITE_LIST = rf"{SITE_WORD}(,{SITE_WORD}){{0,15}}"


def label_problem(labels: Mapping[str, str]) -> str | None:
    """Why a node's site or failure-domain label is not a site word (one line), or None."""
    for key in (SITE_LABEL, FAILURE_DOMAIN_LABEL):
        value = labels.get(key)
        if value is not None and not SITE_PATTERN.match(value):
            return (f"label {key}={value[:80]!r} is not a site word (a letter or digit, then up to 63 letters, "
                    "digits, '.', '_' or '-')")
    return None


def node_site(labels: Mapping[str, str] | None) -> tuple[str | None, str | None]:
    """A node's (site, failure domain) from its labels; None where it reports none."""
    labels = labels or {}
    return labels.get(SITE_LABEL) or None, labels.get(FAILURE_DOMAIN_LABEL) or None


def within_residency(site: str, residency: str) -> bool:
    """A site is within residency R when it is R or is named R-…: sites named for their region (eu-west, eu-north)
    are within residency `eu`; `europa` is not."""
    return site == residency or site.startswith(residency + "-")


def site_allowed(site: str | None, allowed: Collection[str], residency: str) -> bool:
    """Whether a copy may be placed (or routed to) at `site`: within the residency and among the allowed sites,
    where either is set. A node with no site is excluded when either is set: its whereabouts are unknown."""
    if not allowed and not residency:
        return True
    if site is None:
        return False
    return (not allowed or site in allowed) and (not residency or within_residency(site, residency))


def route_rank(site: str | None, preferred: str, failover: Collection[str], allowed: Collection[str],
               residency: str) -> int | None:
    """How `site_local` ranks a copy at `site`: 0 in the preferred site (every allowed site, with no preference),
    1 in a failover site, None where it must never send a request (outside residency or the allowed sites, or a
    site that is neither preferred nor failover)."""
    if not site_allowed(site, allowed, residency):
        return None
    if not preferred:
        return 0
    if site == preferred:
        return 0
    return 1 if site is not None and site in failover else None
