"""UsageMeter reads an answer's usage as it is relayed: a JSON answer's, an event stream's last usage event
(split across chunks too, after `"usage": null` chunks), none from an error or an oversized answer; and what a
request without usage is charged (its max_tokens, else 1)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gateway.endpoint.usage import MAX_JSON_BYTES, Usage, UsageMeter, charged_tokens


def _metered(status: int, content_type: bytes, chunks: list[bytes]) -> UsageMeter:
    meter = UsageMeter()

    async def send(message: dict[str, Any]) -> None:
        pass

    async def relay() -> None:
        watched = meter.watch(send)
        await watched({"type": "http.response.start", "status": status, "headers": [(b"content-type", content_type)]})
        for chunk in chunks:
            await watched({"type": "http.response.body", "body": chunk, "more_body": True})
        await watched({"type": "http.response.body", "body": b"", "more_body": False})

    asyncio.run(relay())
    return meter


def test_a_json_answers_usage_is_read_with_total_from_its_parts() -> None:
    body = json.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}).encode()
    assert _metered(200, b"application/json", [body[:10], body[10:]]).usage() == Usage(7, 3, 10)
    assert _metered(400, b"application/json", [body]).usage() is None  # an error answer costs no tokens
    assert _metered(200, b"application/json", [b"{not json"]).usage() is None
    assert _metered(200, b"application/json", [b" " * MAX_JSON_BYTES, body]).usage() is None


def test_an_event_streams_last_usage_event_is_read_even_split_across_chunks() -> None:
    events = (b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\n' * 3
              + b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":55,"total_tokens":60}}\n\n'
              + b"data: [DONE]\n\n")
    in_the_word = events.rindex(b'"usage"') + 3  # neither half holds `"usage"`
    for cut in (10, in_the_word, len(events) - 40, len(events) - 100):
        meter = _metered(200, b"text/event-stream", [events[:cut], events[cut:]])
        assert meter.usage() == Usage(5, 55, 60), cut
    without = b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\ndata: [DONE]\n\n'
    assert _metered(200, b"text/event-stream", [without]).usage() is None


def test_a_request_without_usage_is_charged_its_max_tokens_or_one() -> None:
    assert charged_tokens(Usage(1, 2, 3), b'{"max_tokens": 500}') == 3
    assert charged_tokens(None, b'{"model":"m","max_tokens": 500}') == 500
    assert charged_tokens(None, b'{"max_completion_tokens":12}') == 12
    assert charged_tokens(None, b'{"model":"m"}') == 1
    assert charged_tokens(None, None) == 1


def test_the_usage_key_is_read_alone_and_an_answers_text_cannot_fake_it() -> None:
    # The model's text is a JSON string: a "usage" in it is escaped, so only the copy's own key is read.
    faked = json.dumps({"choices": [{"message": {"content": '"usage": {"total_tokens": 1}'}}],
                       "usage": {"prompt_tokens": 900, "completion_tokens": 100, "total_tokens": 1000}}).encode()
    assert _metered(200, b"application/json", [faked]).usage() == Usage(900, 100, 1000)
    only_in_text = json.dumps({"choices": [{"message": {"content": '"usage": {"total_tokens": 1}'}}]}).encode()
    assert _metered(200, b"application/json", [only_in_text]).usage() is None
    # A usage nested too deep to parse is no usage (and no RecursionError); `"usage"` as a value is not the key.
    deep = b'{"usage": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert _metered(200, b"application/json", [deep]).usage() is None
    as_value = json.dumps({"object": "usage", "usage": {"prompt_tokens": 2, "completion_tokens": 3}}).encode()
    assert _metered(200, b"application/json", [as_value]).usage() == Usage(2, 3, 5)
    # A key the model's tokens name (a completion's top_logprobs, keyed by token text) after the real usage: its
    # quote is escaped, so it is not taken for the copy's own key.
    token_keyed = json.dumps({"usage": {"prompt_tokens": 4, "completion_tokens": 1},
                              "logprobs": {"top_logprobs": [{'"usage': {"total_tokens": 1}}]}}).encode()
    assert _metered(200, b"application/json", [token_keyed]).usage() == Usage(4, 1, 5)
