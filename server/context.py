"""What every route reaches through a dependency: the server's context (state dir, settings, store, keys,
Temporal), on `app.state`, set once by `create_app`. Nothing else lives in the API process: load reports
go to the store (server/load_reports.py), so any number of API replicas serve alike."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from berth.contracts import LimitPolicy
from berth.errors import UnavailableError
from berth.security import Cipher, ReplicaKeys, SigningKey, TokenVerifier
from berth.settings import ClusterSettings, StateLayout
from berth.temporal import connect
from server.api_keys import ApiKeys
from server.store import Store
from server.token_registry import TokenRegistry


@dataclass
class ServerContext:
    state: StateLayout
    settings: ClusterSettings
    store: Store
    signing: SigningKey
    verifier: TokenVerifier
    cipher: Cipher
    temporal_address: str
    tokens: TokenRegistry
    replica_keys: ReplicaKeys  # each copy's vLLM key, for Berth's own callers of copies only
    api_keys: ApiKeys  # users' `bk_…` keys (issue 15)
    # The cluster's limits (BERTH_LIMITS_FILE, read once at start, as the proxies read it): what an
    # endpoint's owner may only tighten with its policy.
    limits: LimitPolicy = field(default_factory=LimitPolicy)
    _temporal: Client | None = None

    async def temporal(self) -> Client:
        if self._temporal is None:
            try:
                self._temporal = await connect(self.temporal_address, self.cipher)
            except RuntimeError as error:
                raise UnavailableError(
                    f"Cannot reach Temporal at {self.temporal_address} ({error}). Is the stack up (`berth status`)?"
                ) from None
        return self._temporal


async def server_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


Context = Annotated[ServerContext, Depends(server_context)]
