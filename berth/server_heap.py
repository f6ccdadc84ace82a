"""The heap of a long-lived Berth HTTP server (the endpoint proxy, the model gateway, the API), settled for the
cyclic garbage collector once the server has started: `serve` runs uvicorn's Server and calls `settle` when it
is listening.

Why (issue 33, docs/performance.md "The collector's share"): under load CPython's cyclic collector took ~10 % of the
endpoint proxy's CPU. With 32 requests in flight, the count of young container objects passes its default threshold
of 700 every ~20 requests, and every hundredth of those collections walks every object the process holds (84,000 in
the proxy, most of them made while importing its modules: ~32 ms a walk). What startup made lives as long as the
process, so it is collected once and then frozen out of every later collection (`gc.freeze`), and the young
threshold is raised so a collection comes every few hundred requests. Garbage without reference cycles is still
freed at once by its reference count; cycles are still found, a little later."""

from __future__ import annotations

import gc
import socket

import uvicorn

# Container objects allocated (less those freed) before a young collection: CPython's default is 700.
YOUNG_THRESHOLD = 10_000


def settle() -> None:
    """Collect what startup left, freeze what survives out of later collections, raise the young threshold."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)


class SettlingServer(uvicorn.Server):
    """uvicorn's Server, its heap settled once it has started (its lifespan done, its sockets listening)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            settle()


def serve(config: uvicorn.Config, sockets: list[socket.socket] | None = None) -> None:
    """Run `config`'s server until it stops, as `uvicorn.Server(config).run(sockets)` does, settled once started."""
    SettlingServer(config).run(sockets=sockets)
