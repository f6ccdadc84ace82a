"""The error body every Berth refusal on an OpenAI-compatible path answers with, in OpenAI's shape —
`{"error": {"message", "type", "param", "code"}}` — so that the SDKs raise their own exceptions and a client
reads which check refused it in `code`. One builder for the key check, the limits and the deadlines."""

from __future__ import annotations

import json


def error_body(message: str, kind: str, code: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}},
                      separators=(",", ":")).encode()
