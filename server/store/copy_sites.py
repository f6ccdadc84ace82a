"""Where each copy runs (issue 36): the site of its rank-0 node — the node whose address the copy is served at —
read from the reservations and the nodes' labels, for the routing table's `site_local` ranks."""

from __future__ import annotations

from collections.abc import Callable, Collection
from contextlib import AbstractContextManager

from sqlalchemy import select
from sqlalchemy.orm import Session

from berth.sites import node_site
from server.store.tables import NodeRow, ReservationRow


def copy_sites(session: Callable[[], AbstractContextManager[Session]],
               copy_ids: Collection[str]) -> dict[str, str | None]:
    """Copy id → its rank-0 node's site (None: the node reports none, or the copy holds no placement)."""
    if not copy_ids:
        return {}
    with session() as s:
        connection = s.connection()
        leaders: dict[str, str] = {}
        placed = select(ReservationRow.copy_id, ReservationRow.placement).where(ReservationRow.copy_id.in_(copy_ids))
        for copy_id, placement in connection.execute(placed):
            ranks = (placement or {}).get("ranks") or ()
            if ranks and isinstance(ranks[0], dict) and ranks[0].get("node_id"):
                leaders[copy_id] = str(ranks[0]["node_id"])
        labels = dict(connection.execute(select(NodeRow.id, NodeRow.labels).where(
            NodeRow.id.in_(set(leaders.values())))).all()) if leaders else {}
    return {copy_id: node_site(labels.get(leaders[copy_id]))[0] if copy_id in leaders else None
            for copy_id in copy_ids}
