"""What the API refuses before any route runs: bodies over the cluster's limit (413), JSON bodies nested deeper
than berth.bounded_parse allows (400), path IDs outside the ID grammar (400), a query parameter given twice (400),
and malformed bodies — each as one short line that never echoes the input."""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from berth.bounded_parse import MAX_NESTING_DEPTH, json_depth_exceeds
from berth.errors import UserInputError, shown

# Every ID a path carries (workflow, endpoint, copy, node, user, group, token): what Berth mints and
# what user, group and node names may be. `..`, `/` or `%2F` in one never reaches a route.
ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


async def check_path_ids(request: Request) -> None:
    """An app-wide dependency: refuse a request whose path parameters are not IDs."""
    for name, value in request.path_params.items():
        if not isinstance(value, str) or not ID.fullmatch(value) or ".." in value:
            raise UserInputError(f"'{shown(value)}' is not a valid {name.replace('_', ' ')}: IDs are letters, "
                                 "digits, '.', '_' or '-' (at most 128).")


async def check_query_once(request: Request) -> None:
    """An app-wide dependency: refuse a query parameter given more than once. Every one the API reads is one value,
    as its document says; FastAPI would silently keep the last."""
    names = [name for name, _value in request.query_params.multi_items()]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UserInputError(f"The query parameter '{shown(repeated[0])}' is given {names.count(repeated[0])} times; "
                             "give it once.")


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[dict[str, Any], Receive, Send], Awaitable[None]]


class _TooLarge(StarletteHTTPException):
    """Raised from `receive` once the streamed body passes the limit. An HTTPException, because FastAPI
    turns any other exception from reading a body into 400 "There was an error parsing the body"."""

    def __init__(self, detail: str) -> None:
        super().__init__(status_code=413, detail=detail)


class BodyLimit:
    """Refuse a body over `limit` bytes with 413 and one line: at once when Content-Length says so,
    and as soon as the streamed chunks pass it otherwise (a client may send no Content-Length).

    Hand-written rather than FastAPI's `max_body_size`: that one answers a declared oversized body
    with a bare "Content Too Large" in plain text whatever the app's handlers say."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self.message = (f"The request body is larger than the {limit} bytes this API accepts "
                        "(max_request_body_bytes). Send less: a value is at most a few KiB.")
        self.refusal = json.dumps({"detail": self.message}).encode()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope["headers"]:
            if name == b"content-length" and (not value.isdigit() or int(value) > self.limit):
                await self._refuse(send)
                return
        received = 0
        started = False

        async def counted() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge(self.message)
            return message

        async def watched(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, watched)
        except _TooLarge:
            if not started:
                await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"content-length", str(len(self.refusal)).encode())]})
        await send({"type": "http.response.body", "body": self.refusal})


class NestingLimit:
    """Refuse a JSON body nested deeper than `limit` with 400 and one line, before FastAPI parses it: its parser
    recurses per level (100,000 levels: RecursionError, answered with a vague 400; a few hundred: parsed, and
    handed to code that walks it). The body, already bounded by BodyLimit outside this, is read whole here and
    handed on unchanged; a body FastAPI would not read as JSON (a form, text) passes unread."""

    def __init__(self, app: ASGIApp, limit: int = MAX_NESTING_DEPTH) -> None:
        self.app = app
        self.limit = limit
        self.refusal = json.dumps({"detail": f"The request body nests JSON deeper than {limit} levels; send a "
                                             "flatter document."}).encode()

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS") or not _json_body(scope):
            await self.app(scope, receive, send)
            return
        messages = [await receive()]  # BodyLimit's receive: past the size limit it raises, and answers 413
        while messages[-1]["type"] == "http.request" and messages[-1].get("more_body"):
            messages.append(await receive())
        body = b"".join(message.get("body", b"") for message in messages if message["type"] == "http.request")
        if json_depth_exceeds(body, self.limit):
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(self.refusal)).encode())]})
            await send({"type": "http.response.body", "body": self.refusal})
            return

        async def replayed() -> dict[str, Any]:
            return messages.pop(0) if messages else await receive()

        await self.app(scope, replayed, send)


def _json_body(scope: dict[str, Any]) -> bool:
    """Whether FastAPI reads the body as JSON: no content type, application/json or application/…+json."""
    for name, value in scope["headers"]:
        if name == b"content-type":
            kind = value.split(b";", 1)[0].strip().lower()
            return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))
    return True


def install(app: FastAPI, max_body_bytes: int) -> None:
    """Refuse oversized and too deeply nested bodies, and answer a malformed one with one line (FastAPI's own
    answer is a list of errors that quotes the offending input whole)."""
    app.add_middleware(NestingLimit)  # type: ignore[arg-type]
    app.add_middleware(BodyLimit, limit=max_body_bytes)  # type: ignore[arg-type]  # added last: outside, first

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        problems = error.errors()
        first = problems[0] if problems else {}
        where = ".".join(str(part) for part in first.get("loc", ())) or "body"
        more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
        message = f"The request is malformed at {shown(where)}: {shown(first.get('msg', 'invalid'))}{more}."
        return JSONResponse({"detail": message, "code": "invalid_request"}, status_code=422)
