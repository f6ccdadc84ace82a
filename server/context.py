"""What every route reaches through a dependency: the server's context (state dir, settings, store, keys,
Temporal) and the app's rate meters. Both live on `app.state`, set once by `create_app`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request
from temporalio.client import Client

from berth.errors import UnavailableError
from berth.security import Cipher, ReplicaKeys, SigningKey, TokenVerifier
from berth.settings import ClusterSettings, StateLayout
from berth.temporal import connect
from server.autoscaler import FrontDoorRates, LiteLLMRates
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


@dataclass
class Meters:
    """The request rates the autoscaler sizes pools by, as this API process hears them."""

    front_door: FrontDoorRates = field(default_factory=FrontDoorRates)  # counted by the endpoint proxy
    litellm: LiteLLMRates = field(default_factory=LiteLLMRates)  # posted by a pool's LiteLLM sync hook


async def server_context(request: Request) -> ServerContext:
    context: ServerContext = request.app.state.context
    return context


async def meters(request: Request) -> Meters:
    found: Meters = request.app.state.meters
    return found


Context = Annotated[ServerContext, Depends(server_context)]
RateMeters = Annotated[Meters, Depends(meters)]
