"""LiteLLM's key contract (`/key/generate`, `/key/info`, `/key/delete`, `/key/regenerate`) served from
Berth's own keys on a LiteLLM-fronted endpoint: what the endpoint proxy forwards to the control plane (the
credential the client presented, never in a URL), and the answers in LiteLLM's JSON shapes
(litellm/proxy/_types.py GenerateKeyResponse; `/key/info`'s `{"key", "info"}`; `/key/delete`'s
`{"deleted_keys"}`)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from berth.contracts.base import Payload, Response

# Berth's key in LiteLLM's clothes: LiteLLM's virtual keys start with `sk-` (clients and documents expect it).
VIRTUAL_KEY_PREFIX = "sk-"


class LiteLLMKeyCall(Payload):
    """One `/key/*` call as the endpoint proxy forwards it. `presented` is the credential the client sent
    (the endpoint's master key, or for `/key/info` a virtual key asking about itself); `key` is the key the
    call names in its path (`/key/{key}/regenerate`) or query (`/key/info?key=`); `body` is LiteLLM's JSON
    body as the client sent it: open by nature, it is read on the server, which maps what means the same
    in Berth and refuses the rest in one line."""

    presented: str = Field(min_length=1, max_length=4096, repr=False)
    key: str | None = Field(None, max_length=4096, repr=False)
    body: dict[str, Any] = Field(default_factory=dict, repr=False)


class LiteLLMKeyInfo(Response):
    """A virtual key as LiteLLM describes one (GenerateKeyResponse's fields Berth can fill). `token` is the
    Berth key's id (`berth key list` shows it; LiteLLM puts the key's hash there); money fields are null:
    Berth counts tokens, not spend."""

    token: str
    token_id: str
    key_name: str = Field(description="sk-bk_<prefix>_…: the key without its secret")
    key_alias: str = Field(description="The Berth key's name")
    user_id: str = Field(description="The endpoint's owner, whom the key speaks for")
    created_by: str
    models: list[str]
    expires: str | None = Field(None, description="ISO 8601, UTC")
    created_at: str
    max_parallel_requests: int | None = None
    tpm_limit: int | None = None
    rpm_limit: int | None = None
    max_budget: float | None = None
    spend: float = 0.0
    metadata: dict[str, Any] = Field(default_factory=dict)
    status: str = Field(description="active, expired or revoked")
    endpoint_id: str


class LiteLLMIssuedKey(LiteLLMKeyInfo):
    """`/key/generate` and `/key/regenerate`: the key's plaintext (`sk-bk_<prefix>_<secret>`), shown once."""

    key: str = Field(repr=False)
    duration: str | None = Field(None, description="The lifetime granted at /key/generate, e.g. 30d (Berth's keys "
                                 "always expire); null at /key/regenerate, which keeps the expiry")


class LiteLLMKeyInfoAnswer(Response):
    """`/key/info`: the key as it was asked for (its token when the caller asked about itself), and its info."""

    key: str = Field(repr=False)
    info: LiteLLMKeyInfo


class LiteLLMDeletedKeys(Response):
    """`/key/delete`: the keys or aliases passed in, each now revoked (`berth key list` shows them so)."""

    deleted_keys: list[str] = Field(repr=False)
