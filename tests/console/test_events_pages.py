"""The events page over the real app (in-process): the newest events first as the signed-in user may see them (bob
never the administrator's backup), the filters carried into the live fragment's URL, and a kind the API refuses
shown as its one line above an empty list."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth.contracts import EventKind
from server.context import ServerContext
from server.events import Audience, EventDraft, record
from tests.console.app_support import browser, console_context, sign_in, user_token


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    context = console_context(tmp_path / "state")
    for node_id in ("node-a", "node-b"):
        record(context.store, EventDraft(EventKind.NODE_JOINED, f"node {node_id} joined with 4 GPUs",
                                         audience=Audience.everyone(), node_id=node_id))
    record(context.store, EventDraft(EventKind.ADMIN_BACKUP, "admin took a backup", audience=Audience.of_user("admin"),
                                     actor="admin"))
    return context


async def test_the_events_page_lists_what_the_user_may_see_newest_first(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get("/ui/events")).text
        assert 'href="/ui/events" aria-current="page"' in page
        assert page.index('data-id="2"') < page.index('data-id="1"') and "node node-b joined with 4 GPUs" in page
        assert "admin took a backup" not in page and 'hx-get="/ui/events/live" hx-trigger="every 3s"' in page
        filtered = (await client.get("/ui/events", params={"node": "node-a", "kind": "node", "since": "1h"})).text
        assert 'data-id="1"' in filtered and 'data-id="2"' not in filtered
        assert 'hx-get="/ui/events/live?node=node-a&amp;kind=node&amp;since=1h"' in filtered
        live = (await client.get("/ui/events/live", params={"node": "node-b"}, headers={"HX-Request": "true"})).text
        assert live.startswith('<div id="live"') and "<html" not in live and 'data-id="2"' in live
        none = (await client.get("/ui/events", params={"workflow": "wf-none"})).text
        assert "No events match these filters yet." in none


async def test_an_administrator_sees_every_event_and_a_bad_kind_reads_as_one_line(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "admin"))
        page = (await client.get("/ui/events")).text
        assert "admin took a backup" in page and '<td class="kind">admin.backup</td>' in page
        refused = await client.get("/ui/events", params={"kind": "copies"})
        assert refused.status_code == 200 and 'class="error" role="alert">The request is malformed at query.kind' \
            in refused.text and "<table" not in refused.text
