"""The REST client's event method (berth/api_client.py's ApiClient has it): a module of its own, importing only its
route's contracts, so that `berth events` does not import every contract (issue 33)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from berth import contracts  # each contract's module is imported when a method first names it
from berth.api_transport import ApiTransport, one

if TYPE_CHECKING:
    from berth.contracts.events import EventPage


class EventsApi(ApiTransport):
    async def events(self, *, workflow: str | None = None, node: str | None = None, kind: str | None = None,
                     since: str | None = None, after: int | None = None, limit: int = 100) -> EventPage:
        """The cluster's events the caller may see that match: after the cursor `after`, oldest first; without one,
        the newest `limit`. `kind`: kinds or families, comma-separated; `since`: `1h`, an ISO time or a Unix time."""
        asked = {"workflow": workflow, "node": node, "kind": kind, "since": since, "after": after, "limit": limit}
        params = {name: value for name, value in asked.items() if value is not None}
        return one(contracts.EventPage, await self.request("GET", "/v1/events", params=params))
