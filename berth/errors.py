"""Berth's exceptions; each subclasses the builtin it refines so callers can catch broadly.

Each carries `code`, the machine-readable word the API sends beside the message (`{"detail", "code"}`).

    BerthError(Exception)                       base: message is shown to the user as is
    ├── UserInputError(BerthError, ValueError)  bad values, unknown entry/parameter (HTTP 400)
    │   └── CapacityError                       cannot fit any node / beyond cluster limits (HTTP 422)
    ├── NotFoundError(BerthError, LookupError)  unknown workflow, endpoint, node, secret (HTTP 404)
    ├── PermissionDeniedError(BerthError, PermissionError)  caller may not do this (HTTP 403)
    ├── AuthenticationError(BerthError, PermissionError)    missing/invalid credentials (HTTP 401)
    ├── ConflictError(BerthError, RuntimeError) state conflicts, e.g. state dir locked (HTTP 409)
    └── UnavailableError(BerthError, ConnectionError)       API/Temporal unreachable (HTTP 503)
"""

from __future__ import annotations

# An error quotes at most this much of a value a user sent: a 2 MB name must not come back whole.
SHOWN_CHARS = 80


def shown(value: object, limit: int = SHOWN_CHARS) -> str:
    """A user's value as an error message quotes it: cut to `limit` characters, with an ellipsis and
    its full length when cut, control characters escaped, so the message stays one short line."""
    text = value if isinstance(value, str) else repr(value)
    head = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return head if len(text) <= limit else f"{head}… ({len(text)} characters)"


class BerthError(Exception):
    """Base class; `str(error)` is a complete sentence saying what is wrong and what to do."""

    http_status = 500
    code = "internal"


class UserInputError(BerthError, ValueError):
    http_status = 400
    code = "invalid_input"


class CapacityError(UserInputError):
    http_status = 422
    code = "over_capacity"


class NotFoundError(BerthError, LookupError):
    http_status = 404
    code = "not_found"


class PermissionDeniedError(BerthError, PermissionError):
    http_status = 403
    code = "permission_denied"


class AuthenticationError(BerthError, PermissionError):
    http_status = 401
    code = "unauthenticated"


class ConflictError(BerthError, RuntimeError):
    http_status = 409
    code = "conflict"


class UnavailableError(BerthError, ConnectionError):
    http_status = 503
    code = "unavailable"
