"""uvicorn's Server with its process's heap settled (berth/heap.py) once it has started: its lifespan done, its
sockets listening. Every Berth HTTP server (the endpoint proxy, the model gateway, the API) runs through `serve`."""

from __future__ import annotations

import socket

import uvicorn

from berth.heap import settle


class SettlingServer(uvicorn.Server):
    """uvicorn's Server, its heap settled once it has started (its lifespan done, its sockets listening)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            settle()


def serve(config: uvicorn.Config, sockets: list[socket.socket] | None = None) -> None:
    """Run `config`'s server until it stops, as `uvicorn.Server(config).run(sockets)` does, settled once started."""
    SettlingServer(config).run(sockets=sockets)
