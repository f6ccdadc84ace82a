"""What of the upstream client mypyc does not compile, kept interpreted beside it (gateway/edge/upstream.py is
compiled: berth/compiled.py): its error, a ConnectionError (a compiled class cannot derive a built-in exception
but Exception), and the body's reader, an async generator.

The reader reads the response's own state (`_parsed`, `_connection`, `_parser`, `_head_only`, `ends`): it is that
response's method in all but the module it lives in."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import httptools

if TYPE_CHECKING:
    from gateway.edge.upstream import UpstreamResponse


class UpstreamError(ConnectionError):
    """The upstream could not be reached or broke the response; `sent_nothing` says whether the
    response had not started (so a caller may safely retry elsewhere); `refused` whether the request
    never reached the upstream at all (no connection, or not written), so not even it may have acted on it."""

    def __init__(self, message: str, sent_nothing: bool, refused: bool = False) -> None:
        super().__init__(message)
        self.sent_nothing = sent_nothing
        self.refused = refused


async def read_body(response: UpstreamResponse) -> AsyncIterator[bytes]:
    """`UpstreamResponse.body`: each chunk as it arrives; the connection released however it ends."""
    parsed = response._parsed
    eof = False
    try:
        while True:
            if parsed.body:
                chunks, parsed.body = parsed.body, []
                last = len(chunks) - 1
                for index, chunk in enumerate(chunks):
                    response.ends = parsed.complete and index == last  # nothing is fed while it is out
                    yield chunk
            if parsed.complete or response._head_only:
                return
            try:
                data = await response._connection.read()
            except OSError as error:  # reset by the upstream: as broken as a close mid-body
                raise UpstreamError(f"upstream read failed ({type(error).__name__})", sent_nothing=False) from None
            if not data:
                # End of stream: complete for a close-delimited body, otherwise a broken response.
                if eof:
                    raise UpstreamError("upstream closed the connection mid-response", sent_nothing=False)
                eof = True
                if not any(name in (b"content-length", b"transfer-encoding") for name, _ in parsed.headers):
                    return  # close-delimited body: the end of the stream is its end
            try:
                response._parser.feed_data(data)
            except httptools.HttpParserError as error:
                raise UpstreamError(f"malformed upstream response: {error}", sent_nothing=False) from None
            if eof and not parsed.complete and not parsed.body:
                raise UpstreamError("upstream closed the connection mid-response", sent_nothing=False)
    finally:
        response.release()
