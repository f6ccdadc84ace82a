"""`berth top`: a live terminal table of the endpoints, with requests per second, p50 and p99 latency, the
5xx share and ready copies, from two successive scrapes of the endpoint proxy's /metrics (loopback only:
run it on the proxy's host) and the API's endpoint list."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from berth.errors import BerthError
from cli.common import Format, OutputOption, StateDirOption, console, emit_json, fail, resolve_state_dir

if TYPE_CHECKING:
    import httpx

    from berth.api_client import ApiClient
    from cli.top_figures import EndpointFigures, Scrape

# Registered without a name: `berth top`.
app = typer.Typer()
SCRAPE_TIMEOUT_S = 5.0


def default_proxy_url(state_dir: Path) -> str:
    """The running stack's endpoint proxy (its stack.json), else the default stack's port on loopback."""
    from berth.settings import DEFAULT_PORT_BASE, StackPorts, StateLayout
    from stack.state import read_stack

    info = read_stack(StateLayout(state_dir)) or {}
    url = info.get("proxy_url")
    return str(url) if url else f"http://127.0.0.1:{StackPorts(DEFAULT_PORT_BASE).proxy}"


async def scrape(client: httpx.AsyncClient, proxy_url: str) -> Scrape:
    """One scrape of the proxy's /metrics; refusals and silence as one clear BerthError."""
    import httpx

    from cli.top_figures import parse_scrape

    url = f"{proxy_url.rstrip('/')}/metrics"
    try:
        response = await client.get(url)
    except httpx.HTTPError as error:
        raise BerthError(f"could not scrape {url}: {type(error).__name__}") from None
    if response.status_code == 403:
        raise BerthError(f"{url} answers loopback callers only: run `berth top` on the proxy's host")
    if response.status_code == 404:
        raise BerthError(f"{url} answered 404: the proxy's metrics are off (BERTH_METRICS=off)")
    if response.status_code != 200:
        raise BerthError(f"{url} answered {response.status_code}")
    return parse_scrape(response.text, time.monotonic())


async def ready_copies(api: ApiClient) -> dict[str, int]:
    return {endpoint.id: endpoint.ready_copies for endpoint in await api.endpoints()}


def _milliseconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def render(rows: list[EndpointFigures], interval_s: float) -> Table:
    view = Table(title=f"Endpoints (over {interval_s:g} s)", header_style="bold")
    for heading in ("ENDPOINT", "REQ/S", "P50 MS", "P99 MS", "ERRORS", "COPIES"):
        view.add_column(heading, justify="left" if heading == "ENDPOINT" else "right")
    for row in rows:
        view.add_row(row.endpoint, f"{row.requests_per_s:.2f}", _milliseconds(row.p50_s), _milliseconds(row.p99_s),
                     "-" if row.error_rate is None else f"{row.error_rate:.1%}",
                     "-" if row.copies is None else str(row.copies))
    return view


async def _watch(proxy_url: str, interval_s: float, once: bool, output: Format) -> None:
    import asyncio

    import httpx
    from rich.live import Live

    from berth.api_client import ApiClient
    from berth.settings import ClientConfig
    from cli.top_figures import endpoint_figures

    config = ClientConfig.load()
    verify: str | bool = config.ca_file or True
    async with (httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S, verify=verify) as client,
                ApiClient(config.api_url, config.token, ca_file=config.ca_file) as api):
        before = await scrape(client, proxy_url)
        if once or output is Format.JSON:
            await asyncio.sleep(interval_s)
            rows = endpoint_figures(before, await scrape(client, proxy_url), await ready_copies(api))
            if output is Format.JSON:
                emit_json([asdict(row) for row in rows])
            else:
                console.print(render(rows, interval_s))
            return
        with Live(render([], interval_s), console=console, auto_refresh=False) as live:
            while True:
                await asyncio.sleep(interval_s)
                after = await scrape(client, proxy_url)
                live.update(render(endpoint_figures(before, after, await ready_copies(api)), interval_s),
                            refresh=True)
                before = after


@app.command()
def top(proxy_url: Annotated[str | None, typer.Option(help="The endpoint proxy's base URL (default: the "
                                                           "running stack's, from its state dir)")] = None,
        interval: Annotated[float, typer.Option(min=0.1, max=3600, help="Seconds between scrapes")] = 2.0,
        once: Annotated[bool, typer.Option(help="Print one table (two scrapes, --interval apart) and exit")] = False,
        state_dir: StateDirOption = None,
        output: OutputOption = Format.TABLE) -> None:
    """Watch the endpoints: requests/s, p50 and p99 latency, 5xx share and ready copies (Ctrl-C ends it)."""
    import asyncio

    url = proxy_url or default_proxy_url(resolve_state_dir(state_dir))
    try:
        asyncio.run(_watch(url, interval, once, output))
    except BerthError as error:
        raise fail(str(error)) from None
    except KeyboardInterrupt:
        return
