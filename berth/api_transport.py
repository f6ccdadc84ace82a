"""The REST client's transport: one httpx.AsyncClient, the API's errors as Berth's, and the answers read
back as the models their routes declare. `berth/api_client.py` holds the methods, one per route."""

from __future__ import annotations

from typing import Any, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from berth.api_errors import refusal, unreachable, untrusted
from berth.client_config import API_CONNECT_TIMEOUT_S, API_TIMEOUT_S, tls_ca_file
from berth.errors import BerthError, UserInputError
from berth.tls_client import url_context

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T", bound="ApiTransport")


def segment(value: str) -> str:
    """One path segment as the URL carries it: every `/`, `?`, `#` and `%` encoded, so an ID typed on
    the command line (`../../v1/internal/routes`) stays one segment and never names another route."""
    if value in ("", ".", ".."):
        raise UserInputError(f"'{value}' is not an ID. Run the matching `list` command to see the IDs.")
    return quote(value, safe="")


class ApiTransport:
    def __init__(self, base_url: str, token: str | None, timeout_s: float = API_TIMEOUT_S,
                 transport: httpx.AsyncBaseTransport | None = None, ca_file: str | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.base_url = base_url.rstrip("/")
        # An https API with a private CA: the caller's CA file, else BERTH_TLS_CA (what `berth up` gives
        # every component), trusted besides the system store.
        self.ca_file = ca_file or tls_ca_file()
        self._client = httpx.AsyncClient(base_url=self.base_url, headers=headers, transport=transport,
                                         timeout=httpx.Timeout(timeout_s, connect=API_CONNECT_TIMEOUT_S),
                                         verify=url_context(self.base_url, self.ca_file))

    async def __aenter__(self: T) -> T:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.ConnectError as error:
            raise untrusted(self.base_url, error) or unreachable(self.base_url) from None
        except httpx.TransportError:
            raise unreachable(self.base_url) from None
        if response.is_success:
            if response.status_code == 204 or not response.content:
                return None
            if response.headers.get("content-type", "").startswith("application/json"):
                return response.json()
            return response.text
        raise refusal(response.status_code, response.text, response.content)


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
