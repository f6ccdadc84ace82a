"""Site placement (issue 36): what a pool's site rules and the sites and failure domains of its other copies make
of a node for its next copy — a filter (outside the allowed sites or residency, a site at MaxCopiesPerSite, a site
the pool already holds while MinSites is not met) and score terms (the preferred site first, then the failure
domain holding fewest of the pool's copies). Pure: the store reads the pool's copies, server/scheduler.py asks.

MinSites=N: until N distinct sites hold a copy of the pool, a copy goes only to a site that holds none (it waits
rather than double up a site); from then on, any allowed site. N is capped at the number of AllowedSites where
those are set (a pool cannot hold more sites than it may use). A node with no site cannot count toward N, so it
takes no copy while MinSites is unmet."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from berth.contracts.placement import SitePlacement
from berth.sites import site_allowed

# The site filters, in the order they apply (after a node's own state, before its GPUs).
SiteFilter = Literal["outside_sites", "site_full", "site_taken"]


@dataclass(frozen=True)
class SiteDemand:
    """A pool's site rules and where its other copies are, for placing one more copy."""

    preferred: str = ""
    allowed: frozenset[str] = frozenset()
    residency: str = ""
    max_copies_per_site: int = 0  # 0: no limit
    min_sites: int = 0  # 0 or 1: off
    copies_by_site: Mapping[str, int] = field(default_factory=dict)  # the pool's other copies per site
    copies_by_domain: Mapping[str, int] = field(default_factory=dict)  # … per failure domain

    def excluded(self, site: str | None) -> SiteFilter | None:
        """The first site filter that turns a node at `site` away, or None."""
        if not site_allowed(site, self.allowed, self.residency):
            return "outside_sites"
        if site is not None and self.max_copies_per_site and \
                self.copies_by_site.get(site, 0) >= self.max_copies_per_site:
            return "site_full"
        if len(self.copies_by_site) < self.distinct_sites() and (site is None or site in self.copies_by_site):
            return "site_taken"
        return None

    def distinct_sites(self) -> int:
        """How many sites must hold a copy before a site takes a second: MinSites, at most the allowed sites."""
        if self.min_sites < 2:  # one site holding a copy is what any placed copy gives: off
            return 0
        return min(self.min_sites, len(self.allowed)) if self.allowed else self.min_sites

    def terms(self, node_id: str, site: str | None, domain: str | None) -> tuple[int, int]:
        """Score terms, smallest first: not in the preferred site (0 when there is none), then the pool's copies
        already in the node's failure domain (`domain_key`: a node with none is a domain of its own)."""
        return (1 if self.preferred and site != self.preferred else 0,
                self.copies_by_domain.get(domain_key(node_id, domain), 0))

    def bounds(self) -> str:
        """The rules that bound where the pool's copies may go, as the values name them."""
        rules = [f"AllowedSites={','.join(sorted(self.allowed))}"] if self.allowed else []
        rules += [f"Residency={self.residency}"] if self.residency else []
        return " and ".join(rules)

    def detail(self, outcome: SiteFilter, site: str | None) -> str:
        """The one line explain placement shows for a node a site filter turned away."""
        where = f"site {site}" if site is not None else "no site (its agent reports no --site)"
        if outcome == "outside_sites":
            return f"{where}: outside {self.bounds()}"
        if outcome == "site_full":
            return (f"{where} already holds {self.copies_by_site.get(site or '', 0)} of the pool's copies "
                    f"(MaxCopiesPerSite={self.max_copies_per_site})")
        held = ", ".join(sorted(self.copies_by_site)) or "none"
        return (f"{where}: MinSites={self.min_sites} and only {len(self.copies_by_site)} site(s) hold a copy "
                f"({held}): the next copy goes to another site")


def domain_key(node_id: str, domain: str | None) -> str:
    """What a node's failure domain counts as: its --failure-domain, or the node alone where it reports none (':'
    is in no site word, so the two never meet)."""
    return domain if domain is not None else f"node:{node_id}"


def site_demand(rules: SitePlacement | None, copies: Iterable[Iterable[tuple[str, str | None, str | None]]]
                ) -> SiteDemand | None:
    """The SiteDemand for a pool's next copy: its rules (None: the values set none) and, for each of its other
    copies, the (node id, site, failure domain) of each of its nodes. None when there is nothing to apply: no rule
    and no copy on a node that reports a site or domain, so placement keeps its indexed path
    (server/inventory.py)."""
    by_site: Counter[str] = Counter()
    by_domain: Counter[str] = Counter()
    labelled = False
    for nodes in copies:
        where = list(nodes)
        labelled = labelled or any(site is not None or domain is not None for _node, site, domain in where)
        by_site.update({site for _node, site, _domain in where if site is not None})  # a copy counts once per site
        by_domain.update({domain_key(node, domain) for node, _site, domain in where})
    if rules is None and not labelled:
        return None
    rules = rules or SitePlacement()
    return SiteDemand(preferred=rules.preferred, allowed=frozenset(rules.allowed), residency=rules.residency,
                      max_copies_per_site=rules.max_copies_per_site, min_sites=rules.min_sites,
                      copies_by_site=dict(by_site), copies_by_domain=dict(by_domain))
