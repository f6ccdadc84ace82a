"""UsageMeter: the tokens an answer used, read from its `usage` as it is relayed, for per-key tokens per
minute and the audit row. It costs the hot path a reference per chunk: a JSON answer's chunks are kept
(bounded) and parsed once after the answer; of an event stream only the last chunks holding `"usage"` (a
substring test per chunk) and the last few chunks are kept, and parsed once at the end: vLLM sends its usage
in a last event before `[DONE]` when asked (`stream_options: {"include_usage": true}`)."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any, NamedTuple

from berth.bounded_parse import MAX_NESTING_DEPTH, check_json_depth, load_json
from gateway.edge.upstream import Send

MAX_JSON_BYTES = 1 << 20  # a bigger answer is not parsed: its usage is charged as if absent
USAGE = b'"usage"'
_COLON = re.compile(rb"\s*:\s*")
_DECODER = json.JSONDecoder()
MAX_TOKENS = re.compile(rb'"max(?:_completion)?_tokens"\s*:\s*(\d{1,9})')


class Usage(NamedTuple):  # a tuple: made once a request, a third of a frozen dataclass's cost
    prompt: int
    completion: int
    total: int


class UsageMeter:
    """Wraps an ASGI `send`; after the answer, `usage()` is what it reported (None: nothing readable)."""

    __slots__ = ("_chunks", "_event_stream", "_json", "_read", "_size", "_tail", "_usage_chunks")

    def __init__(self) -> None:
        self._json = self._event_stream = False
        self._chunks: list[bytes] = []
        self._size = 0
        self._usage_chunks: tuple[bytes, bytes] = (b"", b"")  # the last chunk with "usage", and the one before
        self._tail: tuple[bytes, bytes] = (b"", b"")  # the last two chunks, whatever they hold
        self._read: tuple[Usage | None] | None = None  # parsed once, when first asked after the answer

    def watch(self, send: Send) -> Send:
        async def watched(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                if body := message.get("body"):
                    self.on_body(body)
            elif message["type"] == "http.response.start":
                self.on_start(message)
            await send(message)
        return watched

    def on_start(self, message: dict[str, Any]) -> dict[str, Any]:
        """The answer's head: a 2xx JSON answer or event stream is read for its usage."""
        if not 200 <= message["status"] < 300:
            return message
        for name, value in message.get("headers", ()):
            if name.lower() == b"content-type":
                kind = value.lower()
                self._json = kind.startswith(b"application/json")
                self._event_stream = kind.startswith(b"text/event-stream")
                return message
        return message

    def on_body(self, chunk: bytes) -> None:
        """A non-empty body chunk of the answer."""
        if self._json:
            self._size += len(chunk)
            if self._size > MAX_JSON_BYTES:
                self._json, self._chunks = False, []
            else:
                self._chunks.append(chunk)
            return
        if not self._event_stream:
            return
        if USAGE in chunk:
            self._usage_chunks = (self._tail[1], chunk)
        self._tail = (self._tail[1], chunk)

    def usage(self) -> Usage | None:
        if self._read is None:
            self._read = (self._parse(),)
        return self._read[0]

    def _parse(self) -> Usage | None:
        if self._json and self._chunks:
            text = b"".join(self._chunks)
            found = _usage_field(text)
            if found is not None:
                return _read(found[0])
            with contextlib.suppress(ValueError):  # malformed, or nested too deep: no usage to read
                answer = load_json(text, "The answer")
                return _read(answer.get("usage")) if isinstance(answer, dict) else None
            return None
        if self._event_stream:
            return _last_in_events(b"".join(self._usage_chunks)) or _last_in_events(b"".join(self._tail))
        return None


def charged_tokens(usage: Usage | None, request_body: bytes | None) -> int:
    """What a request costs its key's tokens per minute: its usage, else the `max_tokens` it asked for, else 1."""
    if usage is not None:
        return usage.total
    match = MAX_TOKENS.search(request_body) if request_body else None
    return max(1, int(match.group(1))) if match else 1


def _usage_field(answer: bytes) -> tuple[Any] | None:
    """The value of the answer's last `"usage"` key, parsed alone (bounded as load_json); None when there is no
    such key or its value does not parse (the caller then parses the whole answer). The answer's own text (the
    model's output: what a caller can steer) cannot fake it: in JSON a string's quotes are escaped, so `"usage":`
    outside a string is a key. It is the copy's own report of what it used, which the copy could state either way:
    vLLM writes it last, and a `usage` nested after the top-level one would be the copy's to put there. It
    spares the hot path parsing every answer whole (~4 µs a request, docs/performance.md)."""
    at = answer.rfind(USAGE)
    # `\"usage"`: an escaped quote inside a key the model's tokens can name (a completion's top_logprobs are keyed by
    # token text), never a `usage` key of its own: look further back.
    while at > 0 and answer[at - 1] == 0x5C:
        at = answer.rfind(USAGE, 0, at)
    colon = _COLON.match(answer, at + len(USAGE)) if at >= 0 else None
    if colon is None:
        return None
    try:
        raw = answer[colon.end():]
        # check_json_depth's own first test, made here: a usage object has a bracket or two, so the check (whose
        # interpreted call re-encodes the text) is reached only by a tail that could nest too deep.
        if raw.count(b"[") + raw.count(b"{") > MAX_NESTING_DEPTH:
            check_json_depth(raw, "The answer")
        tail = raw.decode("utf-8")
        return (_DECODER.raw_decode(tail)[0],)
    except ValueError:  # not UTF-8, malformed, or nested too deep
        return None


def _last_in_events(text: bytes) -> Usage | None:
    """The usage of the last event in `text` (whole events only) that carries one."""
    for event in reversed(text.split(b"data:")):
        if USAGE not in event:
            continue
        with contextlib.suppress(ValueError):  # malformed: no usage to read
            data = load_json(event.strip(), "An answer's event")
            found = _read(data.get("usage")) if isinstance(data, dict) else None
            if found is not None:
                return found
    return None


def _read(usage: Any) -> Usage | None:
    if not isinstance(usage, dict):
        return None
    prompt, completion, total = (usage.get(name) for name in ("prompt_tokens", "completion_tokens", "total_tokens"))
    prompt = prompt if isinstance(prompt, int) else 0
    completion = completion if isinstance(completion, int) else 0
    if not isinstance(total, int):
        total = prompt + completion
    return Usage(prompt, completion, total) if total > 0 or prompt or completion else None

