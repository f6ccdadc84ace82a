"""Token answers besides the registry's (berth.tokens.TokenRecord and RevokeResult, which carry a
Temporal-free import chain of their own): a minted API token."""

from __future__ import annotations

from pydantic import Field

from berth.contracts.base import Response


class MintedToken(Response):
    user: str
    token: str = Field(repr=False)
    id: str
    expires_at: float
