"""The console in a real browser against a simulated stack (issue 18): sign in, start "GPT-OSS 20B" from the
catalog form and watch it turn ready without a reload, mint an endpoint token on its page and get a chat
completion with curl from what the page shows, the API's words for a bad value, a second user kept out of a
user-scoped workflow, every page at two window sizes, and sign-out. Screenshots land in each test's tmp dir."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from playwright.sync_api import BrowserContext, Page, expect

from tests.console.browser import WAIT_MS, console_errors, shot
from tests.support import RunningStack, free_port_base

pytestmark = pytest.mark.browser
ENTRY = "GPT-OSS 20B"
# Opened as they are, each with a screenshot.
PAGES = ("nodes", "capacity", "events", "usage", "secrets", "users", "models", "keys")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningStack]:
    state = Path(tmp_path_factory.mktemp("console-stack"))
    running = RunningStack(state_dir=state, port_base=free_port_base(), nodes=1, simulate_gpus="4x80GB")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def console(stack: RunningStack) -> str:
    return str(stack.info["api_url"]).rstrip("/") + "/ui"


@pytest.fixture(scope="module")
def bob(stack: RunningStack) -> str:
    """A second user in the administrator's group: a group-scoped workflow would be his to see."""
    stack.cli("user", "create", "bob", "--group", "default")
    return stack.cli("login", "--user", "bob", "--print-token").stdout.strip()


@pytest.fixture(scope="module")
def private_workflow(stack: RunningStack) -> str:
    """The administrator's Scope=user workflow (started, not awaited: only its existence matters)."""
    return stack.start_entry(ENTRY, "Scope=user,Proxy=false", watch=False)


def sign_in(browser_context: BrowserContext, console: str, token: str) -> Page:
    page = browser_context.new_page()
    page.goto(console + "/signin")
    page.fill("form#signin-form input[name=token]", token)
    page.locator("form#signin-form").get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).to_be_visible()
    return page


def set_field(page: Page, name: str, value: str) -> None:
    """Set a start-form parameter whichever control the page chose for it (text, select or checkbox), folded
    or not."""
    field = page.locator(f"form#start-form #param-{name}")
    if not field.is_visible():  # folded under "More parameters": unfold it as a user would
        page.locator("form#start-form details:not([open]) > summary").first.click()
    kind = field.evaluate("element => element.type || element.tagName.toLowerCase()")
    if kind.startswith("select"):
        field.select_option(value)
    elif kind == "checkbox":
        field.set_checked(value == "true")
    else:
        field.fill(value)


def open_entry(page: Page, tmp_path: Path) -> None:
    """From the catalog list to the entry's page, by its link, as a user would."""
    page.locator("nav").get_by_role("link", name="Catalog").click()
    expect(page.locator("form#catalog-filter")).to_be_visible()
    shot(page, tmp_path, "catalog")
    page.locator("a.entry", has_text=ENTRY).first.click()
    expect(page.locator("form#start-form")).to_be_visible()
    expect(page.locator("table#memory-table")).to_be_visible()


def test_sign_in_refuses_a_bad_token_and_admits_a_good_one(
        browser_context: BrowserContext, console: str, stack: RunningStack, tmp_path: Path) -> None:
    page = browser_context.new_page()
    errors = console_errors(page)
    page.goto(console + "/catalog")  # signed out: sent to sign in first
    page.wait_for_url(re.compile(r"/ui/signin"))
    page.fill("form#signin-form input[name=token]", "not-a-berth-token")
    page.locator("form#signin-form").get_by_role("button", name="Sign in").click()
    # The sign-in page again, its refusal in an alert (not the console's error page: the post was the page's own).
    expect(page.locator("form#signin-form")).to_be_visible()
    expect(page.locator("[role=alert]")).to_be_visible()
    expect(page.locator("#whoami")).to_have_count(0)
    shot(page, tmp_path, "signin-refused")
    # What `berth console` prints (the console's URL, then a fresh token alone on the last line), typed with
    # the keyboard alone: the token field, then Enter.
    printed = stack.cli("console").stdout.strip().splitlines()
    assert console in printed[0], printed
    page.locator("form#signin-form input[name=token]").focus()
    page.keyboard.type(printed[-1])
    page.keyboard.press("Enter")
    expect(page.locator("#whoami")).to_have_text("admin")
    nav = page.locator("nav")
    for label in ("Catalog", "Workflows", "Endpoints", "Nodes", "Capacity", "Models", "Keys", "Secrets", "Users"):
        expect(nav.get_by_role("link", name=label)).to_be_visible()
    shot(page, tmp_path, "signed-in")
    assert errors == []


def test_start_from_the_form_turns_ready_live_then_curl_gets_an_answer(
        browser_context: BrowserContext, console: str, stack: RunningStack, tmp_path: Path) -> None:
    page = sign_in(browser_context, console, stack.token)
    errors = console_errors(page)
    open_entry(page, tmp_path)
    shot(page, tmp_path, "entry")
    set_field(page, "Proxy", "false")  # the simulated copy answers directly: no LiteLLM needed
    page.locator("form#start-form").get_by_role("button", name="Start").click()
    page.wait_for_url(re.compile(r"/ui/workflows/[^/?#]+$"))
    workflow_id = page.url.rsplit("/", 1)[1]
    # A mark in the page's own JavaScript state: a reload would wipe it, htmx's polling keeps it.
    page.evaluate("window.berthNoReload = true")
    expect(page.locator("#phase")).to_have_text("ready", timeout=WAIT_MS)
    assert page.evaluate("window.berthNoReload === true"), "the page reloaded to show the phase"
    expect(page.locator("table#copies")).to_be_visible()
    expect(page.locator("ol#events")).to_be_visible()
    shot(page, tmp_path, "workflow-ready")
    page.locator("nav").get_by_role("link", name="Workflows").click()
    expect(page.locator(f'tr[data-id="{workflow_id}"] .phase')).to_have_text("ready")
    shot(page, tmp_path, "workflows")
    facts = stack.endpoint(workflow_id)
    page.locator("nav").get_by_role("link", name="Endpoints").click()
    shot(page, tmp_path, "endpoints")
    page.locator(f'tr[data-id="{facts["id"]}"] a').first.click()
    page.wait_for_url(re.compile(rf"/ui/endpoints/{re.escape(facts['id'])}$"))
    answer = chat_with_what_the_page_shows(page, browser_context, stack, facts["model_id"], tmp_path)
    assert answer["choices"][0]["message"]["content"], answer
    assert errors == []


def chat_with_what_the_page_shows(page: Page, browser_context: BrowserContext, stack: RunningStack, model: str,
                                  tmp_path: Path) -> dict[str, Any]:
    """Generate a token on the endpoint page, copy it and the curl snippet with the page's buttons, run the
    pasted snippet, and call the shown URL with the real curl: what a newcomer does with the console and a
    terminal. The answer is that last call's."""
    expect(page.locator("#endpoint-ready")).to_be_visible()
    expect(page.locator("#endpoint-scope")).to_be_visible()
    url = shown_text(page, "#endpoint-url")
    expect(page.locator("pre#snippet-curl")).to_contain_text("$BERTH_TOKEN")
    form = page.locator("form#token-form")
    options = form.locator("select[name=expiration] option").evaluate_all("options => options.map(o => o.value)")
    if "1h" in options:
        form.locator("select[name=expiration]").select_option("1h")
    form.locator("button").first.click()
    token_field = page.locator("input#token-value")
    expect(token_field).to_be_visible()
    token = token_field.input_value()
    assert token and token_field.get_attribute("readonly") is not None
    browser_context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator('button.copy[data-copy="#token-value"]').click()
    assert page.evaluate("navigator.clipboard.readText()") == token
    for snippet in ("curl", "python", "opencode"):
        expect(page.locator(f"pre#snippet-{snippet}")).to_contain_text(token)
    expect(page.locator("pre#snippet-curl")).to_contain_text(url)
    expect(page.locator("pre#snippet-curl")).to_contain_text(model)
    shot(page, tmp_path, "endpoint-token")
    # The newcomer's way: the curl snippet as its Copy button puts it on the clipboard, run by a shell.
    page.locator('button.copy[data-copy="#snippet-curl"]').click()
    snippet = page.evaluate("navigator.clipboard.readText()")
    assert token in snippet and url in snippet, snippet
    pasted = subprocess.run(["bash", "-c", snippet], capture_output=True, text=True, timeout=60, check=False)
    assert pasted.returncode == 0, (pasted.returncode, pasted.stdout, pasted.stderr)
    assert json.loads(pasted.stdout)["choices"][0]["message"]["content"], pasted.stdout
    return curl_chat(stack, url, token, model)


def shown_text(page: Page, selector: str) -> str:
    """What an element shows: a readonly field's value (kept selectable for copying) or its text."""
    element = page.locator(selector)
    if element.evaluate("element => element.tagName") in ("INPUT", "TEXTAREA"):
        return element.input_value().strip()
    return element.inner_text().strip()


def curl_chat(stack: RunningStack, url: str, token: str, model: str) -> dict[str, Any]:
    base = url.rstrip("/").removesuffix("/v1")
    trust = ["--cacert", str(stack.info["ca_file"])] if stack.info.get("ca_file") else []
    body = {"model": model, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}
    result = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "--max-time", "30", *trust, base + "/v1/chat/completions",
         "-H", f"Authorization: Bearer {token}", "-H", "Content-Type: application/json", "-d", json.dumps(body)],
        capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_a_bad_value_is_stopped_in_the_browser_and_the_apis_words_are_shown(
        browser_context: BrowserContext, console: str, stack: RunningStack, tmp_path: Path) -> None:
    page = sign_in(browser_context, console, stack.token)
    open_entry(page, tmp_path)
    entry_url = page.url
    # What the field's type forbids, the browser refuses before anything is sent.
    set_field(page, "GpusPerNode", "0")
    page.locator("form#start-form").get_by_role("button", name="Start").click()
    assert page.locator("#param-GpusPerNode").evaluate("element => !element.validity.valid")
    assert page.url == entry_url
    expect(page.locator("#start-error")).to_have_count(0)
    set_field(page, "GpusPerNode", "1")
    # Each value is valid alone, only the API knows the rule between them: its sentence, every value kept.
    set_field(page, "MinReplicas", "3")
    set_field(page, "MaxReplicas", "2")
    page.locator("form#start-form").get_by_role("button", name="Start").click()
    error = page.locator("#start-error[role=alert]")
    expect(error).to_contain_text("MaxReplicas (2) is below MinReplicas (3)")
    expect(page.locator("#param-MinReplicas")).to_have_value("3")
    shot(page, tmp_path, "start-error")


def test_a_second_user_cannot_see_a_user_scoped_workflow(
        browser_context: BrowserContext, console: str, stack: RunningStack, bob: str, private_workflow: str,
        tmp_path: Path) -> None:
    admin = sign_in(browser_context, console, stack.token)
    admin.goto(console + "/workflows")
    expect(admin.locator(f'tr[data-id="{private_workflow}"]')).to_have_count(1)
    admin.locator("form#signout-form").get_by_role("button", name="Sign out").click()
    admin.wait_for_url(re.compile(r"/ui/signin"))
    page = sign_in(browser_context, console, bob)
    expect(page.locator("#whoami")).to_have_text("bob")
    expect(page.locator("nav").get_by_role("link", name="Users")).to_have_count(0)
    page.goto(console + "/workflows")
    expect(page.locator("table, .empty").first).to_be_visible()
    expect(page.locator(f'tr[data-id="{private_workflow}"]')).to_have_count(0)
    shot(page, tmp_path, "bob-workflows")
    page.goto(console + f"/workflows/{private_workflow}")
    expect(page.locator("[role=alert]")).to_be_visible()
    expect(page.locator("#phase")).to_have_count(0)
    shot(page, tmp_path, "bob-refused")


@pytest.mark.parametrize("width", [1280, 420])
def test_every_page_opens_at_both_widths(
        browser_context: BrowserContext, console: str, stack: RunningStack, private_workflow: str, tmp_path: Path,
        width: int) -> None:
    stack.wait_phase(private_workflow, {"ready"})
    endpoint_id = stack.endpoint(private_workflow)["id"]
    pages = {name: name for name in ("catalog", "workflows", "endpoints", *PAGES)}
    pages |= {"entry": "catalog/entry?name=" + quote(ENTRY), "workflow": f"workflows/{private_workflow}",
              "endpoint": f"endpoints/{endpoint_id}"}
    page = sign_in(browser_context, console, stack.token)
    page.set_viewport_size({"width": width, "height": 800})
    errors = console_errors(page)
    too_wide: dict[str, int] = {}  # every page's, not only the first one's
    for name, path in pages.items():
        response = page.goto(f"{console}/{path}")
        shot(page, tmp_path, f"{name}-{width}")  # first: a failing page's picture is the one most wanted
        assert response is not None and response.status == 200, (name, response and response.status)
        expect(page.locator("#whoami")).to_be_visible()
        expect(page.locator("[role=alert]")).to_have_count(0)
        if name == "nodes":
            expect(page.locator("#capacity")).to_have_text(re.compile(r"\d+ of \d+ GPUs free"))
        if name in ("capacity", "endpoint"):  # charts.js drew its charts (an SVG each) under the CSP
            expect(page.locator("figure.chart svg[role=img]")).to_have_count(3)
        # Usable on a narrow window: nothing pushes the page sideways (wide tables scroll in their own box).
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        if overflow > 1:
            too_wide[f"/ui/{path}"] = overflow
    assert too_wide == {}, f"pixels wider than a {width}px window: {too_wide}"
    assert errors == []


def test_sign_out_ends_the_session(browser_context: BrowserContext, console: str, stack: RunningStack,
                                   tmp_path: Path) -> None:
    page = sign_in(browser_context, console, stack.token)
    page.locator("form#signout-form").get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/ui/signin"))
    expect(page.locator("#whoami")).to_have_count(0)
    shot(page, tmp_path, "signed-out")
    page.goto(console + "/catalog")
    page.wait_for_url(re.compile(r"/ui/signin"))
    expect(page.locator("form#signin-form")).to_be_visible()
