"""Endpoint policies in the store: an endpoint's override of the cluster's limits and its API-key TTL cap,
read from and written to its row's `limits` and `key_max_ttl` annotations (the pool facts beside them
untouched), and the rule for who may write what: an owner may only tighten the cluster's limits, an
administrator anything. The proxies pick a change up on their next routes refresh."""

from __future__ import annotations

from typing import Any

from berth.contracts import EndpointPolicy, LimitPolicy, endpoint_limits
from berth.errors import NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from berth.tokens import parse_duration
from server.store.database import Store
from server.store.tables import EndpointRow

POLICY_ANNOTATIONS = ("limits", "key_max_ttl")


def policy_of(endpoint: EndpointRow) -> EndpointPolicy:
    """The endpoint's policy as its annotations hold it (an invalid `limits` one: a one-line 400)."""
    annotations = endpoint.annotations or {}
    ttl = annotations.get("key_max_ttl")
    if isinstance(ttl, int) and not isinstance(ttl, bool):
        ttl = f"{ttl}s"  # api_keys.ttl_cap_s reads seconds too
    return EndpointPolicy(limits=endpoint_limits(annotations.get("limits")),
                          key_max_ttl=ttl if isinstance(ttl, str) else None)


def check_policy(policy: EndpointPolicy, cluster: LimitPolicy, who: Identity, endpoint: EndpointRow) -> None:
    """Refuse, in one line, a TTL that is no duration and, unless `who` is an administrator, any limit
    looser than the cluster's: those limits protect copies and nodes other endpoints share too. Limits
    sent back exactly as the endpoint has them (an administrator's, say, beside a new TTL) are kept."""
    if policy.key_max_ttl is not None and parse_duration(policy.key_max_ttl) <= 0:
        raise UserInputError(f"key_max_ttl '{policy.key_max_ttl.strip()}' must be longer than zero.")
    if policy.limits is None or who.admin or _limits_unchanged(policy.limits, endpoint):
        return
    loosening = cluster.loosening(policy.limits)
    if loosening:
        raise PermissionDeniedError(f"Endpoint {endpoint.id}'s owner may only tighten the cluster's limits: "
                                    f"{loosening}")


def _limits_unchanged(limits: LimitPolicy, endpoint: EndpointRow) -> bool:
    stored = (endpoint.annotations or {}).get("limits")
    return stored is not None and limits.model_dump(mode="json", by_alias=True, exclude_unset=True) == stored


def _annotations(policy: EndpointPolicy) -> dict[str, Any]:
    """The annotations `policy` sets: `limits` as the fields it sets (as the routes table sends them)."""
    written: dict[str, Any] = {}
    if policy.limits is not None:
        fields = policy.limits.model_dump(mode="json", by_alias=True, exclude_unset=True)
        if fields:
            written["limits"] = fields
    if policy.key_max_ttl is not None:
        written["key_max_ttl"] = policy.key_max_ttl.strip()
    return written


class EndpointPolicies:
    def __init__(self, store: Store) -> None:
        self.store = store

    def replace(self, endpoint_id: str, policy: EndpointPolicy) -> EndpointPolicy:
        """Replace the endpoint's policy (what `policy` leaves out is cleared) and answer it as stored."""
        return self._write(endpoint_id, _annotations(policy))

    def clear(self, endpoint_id: str) -> EndpointPolicy:
        return self._write(endpoint_id, {})

    def _write(self, endpoint_id: str, written: dict[str, Any]) -> EndpointPolicy:
        with self.store.session() as s:
            # FOR UPDATE (PostgreSQL): a pool-facts writer in between would lose its change or ours.
            row = s.get(EndpointRow, endpoint_id, with_for_update=True)
            if row is None:
                raise NotFoundError(f"No endpoint with ID '{endpoint_id}' (it was removed).")
            kept = {k: v for k, v in (row.annotations or {}).items() if k not in POLICY_ANNOTATIONS}
            row.annotations = {**kept, **written}  # a new dict: the JSON column sees the change
            s.flush()
            return policy_of(row)
