"""A completion LiteLLM lost with a dying copy: when a Proxy=true endpoint's copy dies while LiteLLM's
request is in it, LiteLLM answers 500 ("APIConnectionError … Connection error"). Nothing reached the
client yet and the request is whole in hand, so the endpoint proxy sends it again once — after LiteLLM
has stopped routing to the dead copy (or a re-placed copy is ready) — instead of passing the 500 on.

Once, and only for a connection failure between LiteLLM and a copy: an error the model itself answered
(a 500 with any other text) is relayed as it came, and a request that kills copies cannot take down one
copy after another.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable

from gateway.edge.upstream import HOP_BY_HOP, Answer, Send, UpstreamError

# LiteLLM's words for "the deployment's connection failed" (openai's APIConnectionError, httpx's
# RemoteProtocolError when the copy died mid-reply), as it writes them into its error body.
# "All connection attempts failed" / "Connection refused": LiteLLM still routed to a copy already gone.
# "Exception - " then nothing (the JSON's escaped newline, or its end): a connection-level error with no text
# (httpx's ReadError when the dying copy reset the connection); an error the model answered has its text.
# aiohttp's (LiteLLM's default transport, which Berth's LiteLLM uses again since issue 33): "Server disconnected"
# (the copy died mid-reply), "Cannot connect to host" (routed to a copy already gone), "Response payload is not
# completed" and "Not enough data to satisfy" (the body cut short).
LOST_WITH_COPY = re.compile(rb"APIConnectionError|Connection error|Server disconnected|RemoteProtocolError|"
                            rb"peer closed connection|Connection reset|All connection attempts failed|"
                            rb"Connection refused|Cannot connect to host|Response payload is not completed|"
                            rb'Not enough data to satisfy|Exception - (?:\\n|")')
REPLAYED_STATUSES = frozenset({500, 502, 503})
# LiteLLM's "no deployment" (its router holds no copy for the model): its sync hook dropped the pool's dying copy
# a moment before this proxy's routing table did, and the request slipped through (the copy-loss test saw one).
NO_DEPLOYMENT = re.compile(rb"Invalid model name passed in model=")
NO_DEPLOYMENT_STATUS = 400
MAX_ERROR_BODY = 16 * 1024  # an error answer is small; a bigger 5xx body is relayed, never buffered whole
# How long to wait for LiteLLM's routed copies to change before sending again anyway (the API learns of a
# copy's death from its node within a second or two; a copy that is in fact alive gets the replay at once).
SETTLE_S = 3.0
SETTLE_POLL_S = 0.1


class BufferedAnswer:
    """An upstream answer read whole (it was small), to be relayed or dropped for a replay."""

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body

    def lost_with_copy(self) -> bool:
        return self.status in REPLAYED_STATUSES and LOST_WITH_COPY.search(self.body) is not None

    def no_deployment(self) -> bool:
        """LiteLLM's 400 for a model its router holds no copy of: a request for a model the endpoint never
        served gets it too, so the caller replays it only when the pool's copies changed under the request."""
        return self.status == NO_DEPLOYMENT_STATUS and NO_DEPLOYMENT.search(self.body) is not None

    async def send(self, send: Send) -> None:
        headers = [(k, v) for k, v in self.headers if k not in HOP_BY_HOP]
        await send({"type": "http.response.start", "status": self.status,
                    "headers": [*headers, (b"content-length", str(len(self.body)).encode())]})
        await send({"type": "http.response.body", "body": self.body})


async def read_error(response: Answer) -> BufferedAnswer | None:
    """The whole answer when it is a small 5xx that may be a lost completion, or a small 400 that may be LiteLLM's
    "no deployment"; None (nothing read) when it is anything else, so the caller relays it as a stream."""
    if response.status not in REPLAYED_STATUSES and response.status != NO_DEPLOYMENT_STATUS:
        return None
    length = next((v for k, v in response.headers if k == b"content-length"), None)
    if length is None or not length.isdigit() or int(length) > MAX_ERROR_BODY:
        return None
    chunks: list[bytes] = []
    try:
        async for chunk in response.body():
            chunks.append(chunk)
    except UpstreamError:
        pass  # a torn error answer: what arrived is still the answer to relay or replay
    finally:
        response.release()
    return BufferedAnswer(response.status, list(response.headers), b"".join(chunks))


async def settle(look: Callable[[], Awaitable[tuple[frozenset[str], frozenset[str] | None]]],
                 before: frozenset[str] | None, deadline_s: float) -> bool:
    """Wait until LiteLLM routes to exactly the pool's ready copies, at least one, and that set differs
    from `before` (the dead copy gone, or a re-placed one in) — or SETTLE_S has passed with one routable
    (the copy was in fact alive). `look()` refreshes the routing table and returns (the pool's ready
    copies, the copies LiteLLM routes to or None when it has not said). False when no copy became
    routable within `deadline_s` (the caller answers with the loss)."""
    started = time.monotonic()
    while True:
        ready, routed = await look()
        waited = time.monotonic() - started
        if routed is None:
            settled = waited >= SETTLE_S and bool(ready)  # LiteLLM silent: trust the pool after a while
        else:
            settled = bool(routed) and routed == ready and (routed != before or waited >= SETTLE_S)
        if settled:
            return True
        if waited >= deadline_s:
            return False
        await asyncio.sleep(SETTLE_POLL_S)
