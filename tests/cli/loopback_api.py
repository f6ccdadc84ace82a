"""A real API on loopback for the CLI's tests (and the console's charts in a browser): the app of a server context
served by uvicorn in a thread, and the client's environment (BERTH_CONFIG, BERTH_API_URL, BERTH_TOKEN) pointed at
it."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import uvicorn

from berth.processes import free_port
from server.app import create_app
from server.context import ServerContext


@contextmanager
def served_app(context: ServerContext) -> Iterator[str]:
    """Serve `context`'s app on a loopback port until the block ends; its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(context), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, name="test-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start within 10 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def serve_api(context: ServerContext, token: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Serve `context`'s API until the block ends, the CLI calling it with `token`."""
    with served_app(context) as url:
        monkeypatch.setenv("BERTH_CONFIG", str(tmp_path / "client.json"))
        monkeypatch.setenv("BERTH_API_URL", url)
        monkeypatch.setenv("BERTH_TOKEN", token)
        yield
