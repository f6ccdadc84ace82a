"""LiteLLM's virtual keys on a LiteLLM-fronted (Proxy=true) endpoint, served from Berth's own API keys:
`/key/generate` mints a `sk-bk_<prefix>_<secret>` key scoped to the endpoint (and one model), owned by the
endpoint's owner, so `berth key list|revoke` shows and revokes it; `/key/info`, `/key/delete` (a revoke)
and `/key/regenerate` (a rotation) act on those keys.

Who may: the holder of the endpoint's LiteLLM master key (the workflow's ApiKey or generated key, or its
ApiKeySecret resolved as its owner; compared in constant time) speaks for the endpoint's owner on this
endpoint only; a virtual key may ask `/key/info` about itself. LiteLLM never sees these calls: its own
virtual keys need a database its offline install cannot set up."""

from __future__ import annotations

import hmac
import secrets
import time
from datetime import UTC, datetime

from sqlalchemy import select

from berth import kinds
from berth.api_keys import parse_key
from berth.contracts import (
    VIRTUAL_KEY_PREFIX,
    IssuedKey,
    KeyCreateRequest,
    KeyRecord,
    LiteLLMDeletedKeys,
    LiteLLMIssuedKey,
    LiteLLMKeyCall,
    LiteLLMKeyInfo,
    LiteLLMKeyInfoAnswer,
)
from berth.errors import AuthenticationError, NotFoundError, PermissionDeniedError, UserInputError, shown
from berth.tokens import capped_lifetime, human_duration, parse_duration
from server import litellm_key_fields as fields
from server.store.api_keys import DEFAULT_TTL_S, MAX_OVERLAP_S, ApiKeys, record, ttl_cap_s
from server.store.database import Store
from server.store.secrets import Secrets
from server.store.tables import ApiKeyRow, EndpointRow


def virtual_key(plaintext: str) -> str:
    """A Berth key (`bk_…`) as LiteLLM's clients expect a virtual key: `sk-bk_…`."""
    return VIRTUAL_KEY_PREFIX + plaintext


def _berth_key(text: str) -> str:
    text = text.strip()
    return text[len(VIRTUAL_KEY_PREFIX):] if text.startswith(VIRTUAL_KEY_PREFIX + "bk_") else text


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat()


def info(key: KeyRecord) -> LiteLLMKeyInfo:
    return LiteLLMKeyInfo(token=key.id, token_id=key.id, key_name=f"{VIRTUAL_KEY_PREFIX}bk_{key.prefix}_…",
                          key_alias=key.name, user_id=key.owner, created_by=key.owner,
                          models=[key.model] if key.model else [], expires=_iso(key.expires_at),
                          created_at=_iso(key.created_at) or "", max_parallel_requests=key.limits.max_concurrent,
                          tpm_limit=key.limits.tokens_per_minute, status=key.state, endpoint_id=key.endpoint_id)


def issued(key: IssuedKey, lifetime_s: int | None) -> LiteLLMIssuedKey:
    """`lifetime_s`: the duration granted at /key/generate; None at /key/regenerate (the expiry stays)."""
    return LiteLLMIssuedKey(**info(key.record).model_dump(), key=virtual_key(key.key),
                            duration=None if lifetime_s is None else human_duration(lifetime_s))


class LiteLLMKeys:
    def __init__(self, store: Store, api_keys: ApiKeys, cluster_key_max_ttl: str) -> None:
        self.store = store
        self.api_keys = api_keys
        self.cluster_key_max_ttl = cluster_key_max_ttl

    # --- who may ---------------------------------------------------------------------------------
    def _fronted(self, endpoint_id: str) -> EndpointRow:
        endpoint = self.store.endpoint(endpoint_id)
        if not kinds.facts(endpoint.service).fronts_pool:
            raise NotFoundError(f"Endpoint {endpoint_id} is not LiteLLM-fronted (Proxy=true): it has no /key routes; "
                                "use `berth key create`.")
        return endpoint

    def _master_key(self, endpoint: EndpointRow) -> str | None:
        definition = self.store.workflow_definition(self.store.workflow(endpoint.workflow_id))
        if definition.get("api_key_secret"):
            owner = self.store.identity(endpoint.owner)
            return Secrets(self.store).resolve(owner, str(definition["api_key_secret"]))[1]
        key = definition.get("api_key")
        return str(key) if key else None

    def _as_master(self, endpoint_id: str, presented: str) -> EndpointRow:
        """The endpoint if `presented` is its master key; else a 401 (never saying how close it came)."""
        endpoint = self._fronted(endpoint_id)
        master = self._master_key(endpoint)
        if master is None or not hmac.compare_digest(presented.strip().encode(), master.encode()):
            raise AuthenticationError(f"Not endpoint {endpoint_id}'s master key.")
        return endpoint

    def _row(self, endpoint: EndpointRow, named: str) -> ApiKeyRow:
        """The owner's key on this endpoint that `named` names: its token (the Berth key id) or its
        plaintext (`sk-bk_…` or `bk_…`, current or previous secret); to anything else it does not exist."""
        text = _berth_key(named)
        parts = parse_key(text)
        with self.store.session() as s:
            if parts is None:
                row = s.get(ApiKeyRow, text)
            else:
                row = s.scalars(select(ApiKeyRow).where(ApiKeyRow.prefix == parts.prefix)).one_or_none()
                hasher = self.api_keys.hasher
                if row is not None and not (hasher.matches(parts, row.hash)
                                            or hasher.matches(parts, row.previous_hash)):
                    row = None
            if row is None or row.endpoint_id != endpoint.id or row.owner != endpoint.owner:
                raise NotFoundError(f"Key not found on endpoint {endpoint.id}: '{shown(named, 12)}'. "
                                    "`berth key list` shows the endpoint's keys.")
            return row

    # --- the four routes -------------------------------------------------------------------------
    def generate(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMIssuedKey:
        endpoint = self._as_master(endpoint_id, call.presented)
        asked = fields.generate_fields(call.body)
        cap, source = ttl_cap_s(endpoint, self.cluster_key_max_ttl)
        lifetime_s = min(DEFAULT_TTL_S, cap) if asked.duration is None else \
            capped_lifetime(asked.duration, cap, "API keys", word="duration", flag="duration", capped_by=source)
        name = asked.name or f"litellm-{secrets.token_hex(4)}"
        if self._alias_in_use(endpoint, name):
            raise UserInputError(f"Key with alias '{name}' already exists on endpoint {endpoint_id}. Unique key "
                                 "aliases are required: choose another key_alias, or /key/delete that key.")
        # The lifetime is decided above (ttl is the CLI's text); LiteLLM has no lifetime request quota.
        request = KeyCreateRequest(name=name, endpoint_id=endpoint_id, model=asked.model, ttl=None, request_quota=None,
                                   tokens_per_minute=asked.tokens_per_minute, max_concurrent=asked.max_concurrent)
        made = self.api_keys.create(self.store.identity(endpoint.owner), request, lifetime_s)
        return issued(made, lifetime_s)

    def _alias_in_use(self, endpoint: EndpointRow, name: str) -> bool:
        now = time.time()
        with self.store.session() as s:
            rows = s.scalars(select(ApiKeyRow).where(ApiKeyRow.endpoint_id == endpoint.id,
                                                     ApiKeyRow.owner == endpoint.owner, ApiKeyRow.name == name,
                                                     ApiKeyRow.revoked_at.is_(None))).all()
            return any(row.expires_at is None or row.expires_at > now for row in rows)

    def info(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMKeyInfoAnswer:
        """As the master key: any of the endpoint's keys (`?key=` its plaintext or token). As a virtual key:
        itself only (LiteLLM's `/key/info` with the key in the Authorization header)."""
        presented = _berth_key(call.presented)
        if parse_key(presented) is None:
            endpoint = self._as_master(endpoint_id, call.presented)
            if not call.key:
                raise UserInputError("The master key is not a virtual key: pass ?key=<virtual key or its token>.")
            return LiteLLMKeyInfoAnswer(key=call.key, info=info(record(self._row(endpoint, call.key))))
        self._fronted(endpoint_id)
        verdict = self.api_keys.verify(presented, endpoint_id, None)  # 401 for a wrong or lapsed key
        if call.key and _berth_key(call.key) not in (verdict.key_id, presented):
            raise PermissionDeniedError("A virtual key may read its own info only; use the master key for others.")
        with self.store.session() as s:
            row = s.get(ApiKeyRow, verdict.key_id)
            assert row is not None  # verify found it
            own = record(row)
        return LiteLLMKeyInfoAnswer(key=call.key or verdict.key_id, info=info(own))

    def delete(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMDeletedKeys:
        """Revoke every key named (all found first: an unknown one deletes nothing); revoked keys stay in
        `berth key list` as revoked."""
        endpoint = self._as_master(endpoint_id, call.presented)
        named, by_alias = fields.delete_fields(call.body)
        if by_alias:
            ids = self._ids_by_alias(endpoint, named)
        else:
            ids = [self._row(endpoint, key).id for key in named]
        for key_id in ids:
            self.api_keys.revoke(key_id)
        return LiteLLMDeletedKeys(deleted_keys=named)

    def _ids_by_alias(self, endpoint: EndpointRow, aliases: list[str]) -> list[str]:
        with self.store.session() as s:
            rows = s.scalars(select(ApiKeyRow).where(ApiKeyRow.endpoint_id == endpoint.id,
                                                     ApiKeyRow.owner == endpoint.owner,
                                                     ApiKeyRow.name.in_(aliases))).all()
            missing = set(aliases) - {row.name for row in rows}
            if missing:
                raise NotFoundError(f"No key with alias '{shown(sorted(missing)[0], 64)}' on endpoint {endpoint.id}; "
                                    "nothing was deleted.")
            return [row.id for row in rows]

    def regenerate(self, endpoint_id: str, call: LiteLLMKeyCall) -> LiteLLMIssuedKey:
        """A new secret for the key (same token and prefix); the old one works for `grace_period` (LiteLLM's
        default: none)."""
        endpoint = self._as_master(endpoint_id, call.presented)
        named, grace = fields.regenerate_fields(call.body, call.key)
        overlap_s = parse_duration(grace) if grace else 0
        if overlap_s > MAX_OVERLAP_S:
            raise UserInputError(f"grace_period {grace} is longer than 7d; choose a shorter one.")
        row = self._row(endpoint, named)
        return issued(self.api_keys.rotate(row.id, overlap_s), None)
