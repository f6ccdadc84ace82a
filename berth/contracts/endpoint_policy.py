"""An endpoint's policy: its override of the cluster's limits and its cap on API keys' lifetimes, as
`berth endpoint policy` sets them (kept in the endpoint row's `limits` and `key_max_ttl` annotations)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from berth.contracts.base import Payload
from berth.contracts.limits import LimitPolicy


class EndpointPolicy(Payload):
    """Both the body of PUT /v1/endpoints/{id}/policy (it replaces the policy) and its answer. `limits`
    carries only the fields it sets (an explicit null turns a cluster limit off); None: no override."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    limits: LimitPolicy | None = Field(None, description="Overrides the cluster's limits field by field; an "
                                       "endpoint's owner may only tighten them, an administrator anything")
    # The same shape as the cluster's `key_max_ttl` (berth.settings); the API checks it with
    # berth.tokens.parse_duration, which the ground floor's contracts may not import (workflows read them).
    key_max_ttl: str | None = Field(None, max_length=16, pattern=r"^\s*\d{1,9}[smhdw]\s*$",
                                    description="Longest lifetime of an API key for this endpoint, e.g. 7d; "
                                    "the cluster's key_max_ttl still applies when shorter")
