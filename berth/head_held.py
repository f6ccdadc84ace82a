"""HeadHeld: a response's transport for uvicorn's request cycle that sends a whole answer in one system call
(berth/http_guard.py gives one to each request of every Berth server)."""

from __future__ import annotations

import asyncio


class HeadHeld:
    """A response's transport that holds its first write (the head uvicorn writes at `http.response.start`) until
    the next write of the same loop step, so a whole answer — head, then body, in one step — leaves in one system
    call instead of two; a head with nothing after it in that step (an event stream's) leaves at the step's end.
    On loopback a write is the dearest thing a proxied request does (the receiver's side runs in the sender's
    system call: docs/performance.md, "One write a whole answer"). Writes keep their order: a later write joins
    what is held, and a close sends it first."""

    __slots__ = ("_held", "_loop", "_transport", "_wrote")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport, self._loop = transport, loop
        self._held: bytes | None = None
        self._wrote = False

    def write(self, data: bytes) -> None:
        if self._held is not None:
            data, self._held = self._held + data, None
        elif not self._wrote:
            self._wrote = True
            self._held = data
            self._loop.call_soon(self._flush)
            return
        self._transport.write(data)

    def _flush(self) -> None:
        if self._held is not None:
            data, self._held = self._held, None
            if not self._transport.is_closing():
                self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def close(self) -> None:
        self._flush()
        self._transport.close()
