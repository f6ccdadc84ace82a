"""The console's way to the REST API: an ApiClient carrying the signed-in user's token, sent in-process to
the very app that serves the page (httpx's ASGI transport), so every scope rule, limit and refusal is the
API's own and no second network hop or credential exists."""

from __future__ import annotations

import httpx
from fastapi import FastAPI

from berth.api_client import ApiClient

# The in-process transport never resolves this name; it only fills the Host header the API sees.
_BASE_URL = "http://berth-console.internal"


def api_as(app: FastAPI, token: str | None) -> ApiClient:
    """A client for one console request; the caller closes it (the page dependency does)."""
    # Bounded like any API client: a slow route answers the page with the API's timeout, not a hang.
    return ApiClient(_BASE_URL, token, timeout_s=30.0, transport=httpx.ASGITransport(app=app))
