"""The indexed inventory's walk for a copy with site terms (issue 36; server/site_placement.py): the `demand.nodes`
best nodes by `scheduler.placement_key`, read from the inventory's buckets rather than scanned.

The nodes that hold the copy's model (the cache hit, the key's third term) are few and judged one by one, as the
index's own path does. The others come from the buckets in (fill, id) order — the key's tail — so among them, nodes
whose site terms (the head) are the same arrive best first: each head keeps its first `demand.nodes`, and the walk
stops as soon as the lowest head any node could have holds that many. When the preferred site has no room it walks
every fitting node, as cheaply as the scan; the answer is the scan's either way (tests/server/test_site_placement.py
compares them on random clusters)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from server.scheduler import Demand, NodeView, Policy, placement_key

Head = tuple[int, int]  # placement_key's site terms: not the preferred site, the pool's copies in the domain


def best(demand: Demand, policy: Policy, nodes: Mapping[str, NodeView], walk: Iterable[str], cached: Collection[str],
         floor: Head) -> list[NodeView] | None:
    """The best `demand.nodes` fitting nodes, the site filters applied; None when fewer pass. `walk` names the
    fitting nodes in (fill, id) order; `cached` the nodes holding the copy's model (few: judged one by one, and
    skipped by the walk, whose heads are then all "not cached"); `floor`: a head no walked node can beat."""
    sites = demand.sites
    assert sites is not None
    wanted, min_memory = demand.nodes, demand.min_gpu_memory_gb
    candidates = [nodes[node_id] for node_id in cached if sites.excluded(nodes[node_id].site) is None
                  and nodes[node_id].unavailable() is None
                  and nodes[node_id].free_count(min_memory) >= demand.gpus_per_node]
    found: dict[tuple[int, int], list[NodeView]] = {}
    for node_id in walk:
        node = nodes[node_id]
        if node_id in cached or sites.excluded(node.site) is not None:
            continue
        head = sites.terms(node.id, node.site, node.failure_domain)
        kept = found.setdefault(head, [])
        if len(kept) < wanted:
            kept.append(node)
            if head == floor and len(kept) == wanted:
                break
    candidates += [node for kept in found.values() for node in kept]
    if len(candidates) < wanted:
        return None
    return sorted(candidates, key=lambda n: placement_key(n, n.free_count(min_memory), demand, policy))[:wanted]


def floor_of(demand: Demand, groups: Iterable[tuple[str | None, str | None]]) -> Head:
    """The lowest head a walked node could have, over the cluster's (site, failure domain) groups that the site
    filters let through: nodes with no domain count as holding none of the pool's copies (each is a domain of its
    own; too low a floor only walks further)."""
    sites = demand.sites
    assert sites is not None
    heads = [(1 if sites.preferred and site != sites.preferred else 0,
              sites.copies_by_domain.get(domain, 0) if domain is not None else 0)
             for site, domain in groups if sites.excluded(site) is None]
    return min(heads, default=(0, 0))
