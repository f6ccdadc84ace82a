"""How a refused request to the Berth API becomes Berth's error: a refusal's status and body, an API that cannot be
reached, a certificate that is not trusted. One place for the REST client (berth/api_transport.py, httpx) and
the CLI's fast path (cli/fast/api_get.py, the standard library), so that both say the same line (issue 33)."""

from __future__ import annotations

import json

from berth.errors import (
    AuthenticationError,
    BerthError,
    CapacityError,
    ConflictError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
    UserInputError,
)

_ERRORS: dict[int, type[BerthError]] = {
    400: UserInputError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 422: CapacityError, 503: UnavailableError,
}


def refusal(status: int, text: str, content: bytes) -> BerthError:
    """A non-2xx answer as the error its status maps to, saying the body's `detail` (the API's Refusal), else
    the body as text."""
    message: object = text
    try:
        message = json.loads(content).get("detail", message)
    except ValueError:
        pass
    return _ERRORS.get(status, BerthError)(str(message))


def unreachable(base_url: str) -> UnavailableError:
    return UnavailableError(f"Cannot reach the Berth API at {base_url}. Is the stack running? "
                            "Start it with `berth up`, or set BERTH_API_URL.")


def untrusted(base_url: str, error: Exception) -> UnavailableError | None:
    """The error for a connection that failed because the API's certificate was refused; None for any other."""
    if "CERTIFICATE_VERIFY_FAILED" not in str(error):
        return None
    return UnavailableError(f"The Berth API's certificate at {base_url} is not trusted ({_verify_reason(error)}). "
                            "Set BERTH_TLS_CA to the cluster CA (an administrator prints it with `berth ca-cert`).")


def _verify_reason(error: Exception) -> str:
    """OpenSSL's words for a refused certificate (`unable to get local issuer certificate`), the phrase
    the documents' troubleshooting row names."""
    text = str(error)
    marker = "certificate verify failed: "
    return text.split(marker, 1)[1].split(" (_ssl")[0].rstrip(")") if marker in text else "verify failed"
