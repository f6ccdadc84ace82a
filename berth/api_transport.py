"""The REST client's transport: one httpx.AsyncClient, the API's errors as Berth's, and the answers read
back as the models their routes declare. `berth/api_client.py` holds the methods, one per route."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

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
from berth.settings import tls_ca_file
from berth.tls_client import url_context

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T", bound="ApiTransport")

_ERRORS: dict[int, type[BerthError]] = {
    400: UserInputError, 401: AuthenticationError, 403: PermissionDeniedError, 404: NotFoundError,
    409: ConflictError, 422: CapacityError, 503: UnavailableError,
}


def _verify_reason(error: Exception) -> str:
    """OpenSSL's words for a refused certificate (`unable to get local issuer certificate`), the phrase
    the documents' troubleshooting row names."""
    text = str(error)
    marker = "certificate verify failed: "
    return text.split(marker, 1)[1].split(" (_ssl")[0].rstrip(")") if marker in text else "verify failed"


def segment(value: str) -> str:
    """One path segment as the URL carries it: every `/`, `?`, `#` and `%` encoded, so an ID typed on
    the command line (`../../v1/internal/routes`) stays one segment and never names another route."""
    if value in ("", ".", ".."):
        raise UserInputError(f"'{value}' is not an ID. Run the matching `list` command to see the IDs.")
    return quote(value, safe="")


class ApiTransport:
    def __init__(self, base_url: str, token: str | None, timeout_s: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None, ca_file: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        # An https API with a private CA: the caller's CA file, else BERTH_TLS_CA (what `berth up` gives
        # every component), trusted besides the system store.
        self.ca_file = ca_file or tls_ca_file()
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                         timeout=httpx.Timeout(timeout_s, connect=5.0),
                                         verify=url_context(self.base_url, self.ca_file))

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def _unreachable(self) -> UnavailableError:
        return UnavailableError(f"Cannot reach the Berth API at {self.base_url}. Is the stack running? "
                                "Start it with `berth up`, or set BERTH_API_URL.")

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            if "CERTIFICATE_VERIFY_FAILED" in str(error):
                raise UnavailableError(
                    f"The Berth API's certificate at {self.base_url} is not trusted ({_verify_reason(error)}). "
                    "Set BERTH_TLS_CA to the cluster CA (an administrator prints it with `berth ca-cert`)."
                ) from None
            raise self._unreachable() from None
        except httpx.TransportError:
            raise self._unreachable() from None
        if response.is_success:
            if response.status_code == 204 or not response.content:
                return None
            if response.headers.get("content-type", "").startswith("application/json"):
                return response.json()
            return response.text
        message = response.text
        try:
            message = response.json().get("detail", message)
        except ValueError:
            pass
        raise _ERRORS.get(response.status_code, BerthError)(str(message))



def body(request: BaseModel) -> Any:
    """A request model as its JSON body: the fields the caller set (a default left out, as before)."""
    return request.model_dump(mode="json", exclude_unset=True)


def one(model: type[M], data: Any) -> M:
    """The answer as its route's model; an answer that is not one is Berth's error, so that every caller's
    `except BerthError` (a refresh loop, the CLI's one-line errors) covers it too."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise BerthError(f"The Berth API's answer is not a {model.__name__} ({error.error_count()} "
                         f"problem(s), first: {error.errors()[0]['loc']} {error.errors()[0]['msg']}). "
                         "Are the API and this client the same version?") from None


def many(model: type[M], rows: Any) -> list[M]:
    """A listing's rows as `model`s."""
    if not isinstance(rows, list):
        raise BerthError(f"The Berth API answered a listing with {type(rows).__name__}, not a list.")
    return [one(model, row) for row in rows]
