"""One upstream connection of the proxies' pooled client (gateway/edge/upstream.py): an asyncio Protocol that keeps
what arrives until the response parser reads it, pauses reading while too much waits unread, and lets a streamed
request body wait on the transport's write buffer."""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast

READ_HELD = 1 << 18  # bytes an upstream connection holds unread before it stops reading (a slow client)


class UpstreamConnection(asyncio.Protocol):
    """One upstream connection as an asyncio Protocol: what arrives is kept until `read` takes it, one future only
    when a read has to wait. (StreamReader did the same through three more Python layers a read — its protocol, its
    feed and its waiter — on every answer and every streamed chunk: docs/performance.md.) Reading pauses while
    READ_HELD bytes wait unread (a slow client of a fast copy), as StreamReader's limit did; `drain` waits while the
    transport's write buffer is over its high-water mark."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._held: list[bytes] = []
        self._held_size = 0
        self._eof = False
        self._error: OSError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused_reading = False
        self._drained: asyncio.Future[None] | None = None  # set while writing is paused

    # --- asyncio.Protocol ----------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TCPTransport is not registered as one

    def data_received(self, data: bytes) -> None:
        self._held.append(data)
        self._held_size += len(data)
        if self._held_size > READ_HELD and not self._paused_reading and self.transport is not None:
            self._paused_reading = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake()
        return False  # the transport closes itself: a connection the upstream closed is never reused

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        if exc is not None:  # what a read raises: an OSError, as a broken socket's always is
            self._error = exc if isinstance(exc, OSError) else ConnectionResetError(f"upstream connection lost: {exc}")
        self._wake()
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_exception(exc or ConnectionResetError("upstream connection lost"))
            drained.exception()  # retrieved: a drain nobody awaits any more must not log "never retrieved"

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # --- what the pool and a response use ------------------------------------------------------------
    async def read(self) -> bytes:
        """What has arrived (waiting for something when nothing has); b"" at the end of the stream. Raises what
        broke the connection (an OSError) once what arrived before it is read."""
        if not self._held:
            # One test of the error after any wait: mypyc trusts a narrowing across an await, and the error comes
            # while this waits.
            if self._error is None and not self._eof:
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None
            if not self._held:
                if self._error is not None:
                    raise self._error
                return b""
        held = self._held
        data = held[0] if len(held) == 1 else b"".join(held)
        self._held = []
        self._held_size = 0
        if self._paused_reading and self.transport is not None:
            self._paused_reading = False
            self.transport.resume_reading()
        return data

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        if self._error is not None:
            raise self._error
        if self.transport is None or self.transport.is_closing():
            raise ConnectionResetError("upstream connection closed")
        if self._drained is not None:
            await self._drained

    def close(self) -> None:
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.close()

    def closed_by_upstream(self) -> bool:
        """The upstream closed its end (FIN read) or the transport is going: no further request fits."""
        return self._eof or self.transport is None or self.transport.is_closing()
