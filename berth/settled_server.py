"""uvicorn's Server with its process's heap settled (berth/heap.py) once it has started: its lifespan done, its
sockets listening. Every Berth HTTP server (the endpoint proxy, the model gateway, the API) runs through `serve`."""

from __future__ import annotations

import contextlib
import socket
import sys

import uvicorn
from uvicorn.server import STARTUP_FAILURE

from berth.heap import settle


class SettlingServer(uvicorn.Server):
    """uvicorn's Server, its heap settled once it has started (its lifespan done, its sockets listening)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            settle()


def serve(config: uvicorn.Config, sockets: list[socket.socket] | None = None) -> None:
    """Run `config`'s server until it stops, settled once started; as `uvicorn.run` ends, a server that never
    started exits with uvicorn's startup-failure status (3), so its supervisor reads a failure, not a clean stop."""
    server = SettlingServer(config)
    with contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=sockets)
    if not server.started:
        sys.exit(STARTUP_FAILURE)
