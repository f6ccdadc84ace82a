"""Model listings as callers see them: vLLM's `root` in `/v1/models` is the weights' directory on the
node (a path into Berth's state dir), so the endpoint proxy replaces it with the model's id.

Nothing in Berth, LiteLLM or the OpenAI clients reads `root`; vLLM's ModelCard has it, so it stays
present (as the id) for clients that parse vLLM's own schema."""

from __future__ import annotations

import json
import logging
from typing import Any

from berth.bounded_parse import load_json
from gateway.edge.upstream import HOP_BY_HOP, Answer, Send, UpstreamError

# A listing names a handful of models; one larger than this is not a listing worth buffering.
MAX_LISTING_BYTES = 1024 * 1024


def is_listing(method: str, rest: str) -> bool:
    """Whether a proxied request (its path after /endpoints/ID/) asks for the model listing."""
    return method == "GET" and rest.strip("/") in ("v1/models", "models")


def scrub(body: bytes) -> bytes:
    """The listing with every card's `root` set to its id; anything not a listing unchanged."""
    try:
        listing: Any = load_json(body, "The model listing")
    except ValueError:  # not JSON, or nested too deep: not a listing
        return body
    cards = listing.get("data") if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return body
    changed = False
    for card in cards:
        if isinstance(card, dict) and "root" in card and card["root"] != card.get("id"):
            card["root"], changed = card.get("id"), True
    if not changed:
        return body  # byte for byte what the server sent (LiteLLM's listing carries no root): issue 31
    # Compact, as vLLM's and LiteLLM's FastAPI answers are: only `root` differs from what was sent.
    return json.dumps(listing, separators=(",", ":"), ensure_ascii=False).encode()


async def relay_listing(response: Answer, send: Send, log: logging.Logger, name: str) -> None:
    """Buffer the listing (bounded), scrub it, and send it whole with its new length."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in response.body():
            size += len(chunk)
            if size > MAX_LISTING_BYTES:
                break
            chunks.append(chunk)
    except UpstreamError as error:
        log.warning("upstream %s broke mid-listing: %s", name, error)
        size = MAX_LISTING_BYTES + 1
    finally:
        response.release()
    if size > MAX_LISTING_BYTES:
        body = (b'{"error":{"message":"The model service sent no usable model listing.",'
                b'"type":"bad_gateway","code":502}}')
        status, headers = 502, [(b"content-type", b"application/json")]
    else:
        body = scrub(b"".join(chunks)) if response.status == 200 else b"".join(chunks)
        status, headers = response.status, [(k, v) for k, v in response.headers if k not in HOP_BY_HOP]
    await send({"type": "http.response.start", "status": status,
                "headers": [*headers, (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
