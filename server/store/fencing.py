"""Fencing: the GPUs and ports of a rank whose node agent was lost stay reserved until that node confirms
the rank's process is gone, so a new copy is never placed on a GPU or port a live orphan still holds.

The node is the witness: each heartbeat lists what its live rank processes hold (`NodeHolding`). A fenced
row whose owner the node no longer reports is freed; a live process the store holds nothing for (its
copy released while the node was away) is fenced anew, in the same transaction that marks the node ready.
Run inside the store's placement lock, so no placement reads the rows half reconciled."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import InstrumentedAttribute, Session
from sqlalchemy.sql.elements import ColumnElement

from berth.contracts import MAX_HOLDINGS, NodeHolding
from berth.errors import UserInputError
from server.store.tables import AllocationRow, PortRow

log = logging.getLogger("berth.server")


def holdings(inventory: dict[str, Any]) -> list[NodeHolding] | None:
    """What the node's live rank processes hold; None from an agent too old to say (no fencing then)."""
    raw = inventory.get("held")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) > MAX_HOLDINGS:
        raise UserInputError(f"a node heartbeat's 'held' must be a list of at most {MAX_HOLDINGS} holdings")
    try:
        return [NodeHolding.model_validate(item) for item in raw]
    except ValidationError as error:
        raise UserInputError(f"a node heartbeat's 'held' is malformed: {error.errors()[0]['msg']}") from None


def not_fenced(column: InstrumentedAttribute[bool | None]) -> ColumnElement[bool]:
    """SQL for rows a copy's release may free (fenced is NULL in rows from before fencing)."""
    return or_(column.is_(None), column.is_(False))


def fence(s: Session, copy_id: str, nodes: tuple[str, ...]) -> None:
    """Mark what `copy_id` holds on `nodes` as fenced: its release leaves it to the nodes to free."""
    if not nodes:
        return
    s.execute(update(AllocationRow).where(AllocationRow.copy_id == copy_id, AllocationRow.node_id.in_(nodes))
              .values(fenced=True))
    s.execute(update(PortRow).where(PortRow.owner == copy_id, PortRow.node_id.in_(nodes)).values(fenced=True))


def reconcile(s: Session, node_id: str, held: list[NodeHolding]) -> bool:
    """Bring the node's fenced rows in line with what its live processes hold (see the module doc). True when a GPU
    was freed or fenced anew: placement's views must re-read the node (server/store/placement_view.py)."""
    owners = {h.owner for h in held}
    freed = s.execute(delete(AllocationRow).where(AllocationRow.node_id == node_id, AllocationRow.fenced.is_(True),
                                                  AllocationRow.copy_id.not_in(owners)))
    s.execute(delete(PortRow).where(PortRow.node_id == node_id, PortRow.fenced.is_(True),
                                    PortRow.owner.not_in(owners)))
    if not held:
        return bool(freed.rowcount)  # type: ignore[attr-defined]
    gpus = dict(s.execute(select(AllocationRow.gpu_index, AllocationRow.copy_id)
                          .where(AllocationRow.node_id == node_id)).all())
    ports = dict(s.execute(select(PortRow.port, PortRow.owner).where(PortRow.node_id == node_id)).all())
    held_before = len(gpus)
    for holding in held:
        owner = holding.owner
        for gpu in holding.gpus:
            row = AllocationRow(node_id=node_id, gpu_index=gpu, copy_id=owner, fenced=True)
            _hold(s, gpus, gpu, row, owner, f"GPU {gpu} of {node_id}")
        for port in holding.ports:
            _hold(s, ports, port, PortRow(node_id=node_id, port=port, owner=owner, fenced=True), owner,
                  f"port {port} of {node_id}")
    return bool(freed.rowcount) or len(gpus) > held_before  # type: ignore[attr-defined]


def _hold(s: Session, taken: dict[int, str], key: int, row: AllocationRow | PortRow, owner: str, what: str) -> None:
    holder = taken.get(key)
    if holder is None:
        s.add(row)
        taken[key] = owner
        log.warning("fencing %s: a live process of %s holds it and the store had released it", what, owner)
    elif holder != owner:
        # Cannot be undone here (the other copy is placed); say so loudly: it is the bug fencing prevents.
        log.error("%s is reserved for %s but a live process of %s holds it", what, holder, owner)
