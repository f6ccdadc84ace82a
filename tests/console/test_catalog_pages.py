"""The catalog pages and the start form over the real app (in-process; a refused start never reaches
Temporal, so none runs here — tests/console/test_console_browser.py starts one for real)."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.context import ServerContext
from tests.console.app_support import browser, console_context, csrf_of, sign_in, user_token

ENTRY = "/ui/catalog/entry?name=GPT-OSS+20B"


@pytest.fixture
def context(tmp_path: Path) -> ServerContext:
    return console_context(tmp_path / "state")


async def test_the_catalog_filters_by_category_and_tag(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        everything = (await client.get("/ui/catalog")).text
        assert 'id="catalog-filter"' in everything and everything.count('class="entry"') >= 5
        tagged = (await client.get("/ui/catalog", params={"tag": "OpenAI"})).text
        assert "GPT-OSS 20B" in tagged and "SmolLM2" not in tagged
        nothing = (await client.get("/ui/catalog", params={"tag": "no-such-tag"})).text
        assert 'class="empty"' in nothing and "Show all entries" in nothing


async def test_the_entry_page_has_the_memory_table_and_a_typed_form(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        page = (await client.get(ENTRY)).text
        assert 'id="memory-table"' in page and "131,072 (default)" in page
        assert 'id="param-GpusPerNode" name="GpusPerNode" type="number"' in page
        assert 'id="param-Proxy" name="Proxy"' in page  # a bool is a true/false choice, keyboard-friendly
        unknown = await client.get("/ui/catalog/entry", params={"name": "No such entry"})
        assert unknown.status_code == 404 and 'role="alert"' in unknown.text and "\"detail\"" not in unknown.text


async def test_a_refused_value_shows_the_api_words_and_keeps_every_value(context: ServerContext) -> None:
    async with browser(context) as client:
        await sign_in(client, user_token(context, "bob"))
        csrf = csrf_of((await client.get(ENTRY)).text)
        answer = await client.post(ENTRY, data={"csrf": csrf, "GpusPerNode": "0", "MinReplicas": "2",
                                                "workflow-name": "mine"})
        assert answer.status_code == 400
        assert 'id="start-error" class="error" role="alert">GpusPerNode=0 is below its minimum 1.' in answer.text
        assert 'name="MinReplicas" type="number" value="2"' in answer.text and 'value="mine"' in answer.text
        script = await client.post(ENTRY, data={"csrf": csrf, "MinReplicas": "<script>alert(1)</script>"})
        assert script.status_code == 400 and "<script>alert" not in script.text  # escaped, never markup
