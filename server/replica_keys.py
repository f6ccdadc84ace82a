"""Replica keys: a gateway (run by a node agent for its owner) reads the keys of the copies it discovers.
Users never get a copy's key; the endpoint proxy and LiteLLM get theirs from the admin routes table and
the endpoint's service replica list. The routes are in server/routes/internal.py, their answers' models in
berth/contracts/internal.py."""

from __future__ import annotations

from berth.contracts import PoolFacts
from server.store.tables import EndpointRow

# As long as the owner token the gateway polls the endpoints API with (a restart renews both).
REPLICA_KEYS_TOKEN_TTL_S = 7 * 24 * 3600


def discoverable(endpoint: EndpointRow) -> bool:
    """A Proxy=false pool: its copies are called directly (a Proxy=true pool's sit behind LiteLLM)."""
    return PoolFacts.from_annotations(endpoint.annotations).discoverable
