"""Catalog test fixtures: a real control-plane API on loopback (no Temporal), an admin token, fake nodes."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from berth.security import Identity
from server.app import build_context, create_app
from server.context import ServerContext


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class CatalogApi:
    """A running API: `client` carries the admin token; `context` is the server's own state."""

    base_url: str
    token: str
    context: ServerContext
    client: httpx.Client

    def add_node(self, node_id: str, gpus: list[float], taints: list[str] | None = None) -> None:
        inventory: dict[str, Any] = {
            "address": "127.0.0.1",
            "engine": "simulator",
            "port_start": 40000,
            "gpus": [
                {"index": i, "name": f"GPU {size:g}GB", "memory_gb": size} for i, size in enumerate(gpus)
            ],
            "taints": taints or [],
        }
        response = self.client.post(f"/v1/nodes/{node_id}/heartbeat", json=inventory)
        assert response.status_code == 200, response.text

    def start(self, entry: str, values: dict[str, Any] | None = None) -> httpx.Response:
        return self.client.post("/v1/workflows", json={"entry": entry, "values": values or {}})


@pytest.fixture
def catalog_api(tmp_path: Path) -> Iterator[CatalogApi]:
    # Port 1 refuses at once: the catalog routes never need Temporal, and a start that passes
    # every check reaches it and gets 503, which is how tests see that validation passed.
    context = build_context(tmp_path / "state", temporal_address="127.0.0.1:1")
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(context), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, name="catalog-api", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the API did not start within 10 s")
        time.sleep(0.02)
    token = context.signing.api_token(Identity(user="admin", groups=("default",), org="default", admin=True))
    base_url = f"http://127.0.0.1:{port}"
    client = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    try:
        yield CatalogApi(base_url=base_url, token=token, context=context, client=client)
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=10)
