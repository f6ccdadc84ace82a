"""LiteLLM's `/key/*` request bodies read as Berth key settings. What means the same is mapped (`duration` →
TTL, `key_alias` → name, `models: [one]` → model, `max_parallel_requests` → max_concurrent, `tpm_limit` →
tokens_per_minute, `grace_period` → a rotation's overlap); everything else is refused in one line saying
what to use instead. A field LiteLLM knows, sent with its empty default (null, [], {}, false, a spend of 0),
asks for nothing and passes: clients built on LiteLLM's own types send those."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from berth.errors import UserInputError, shown

MAPPED = ("key_alias", "duration", "models", "max_parallel_requests", "tpm_limit")
# LiteLLM's model name meaning "every model of the proxy": a key with no model scope in Berth.
ALL_MODELS = "all-proxy-models"
# Berth's durations (berth/tokens.py): LiteLLM's `mo` and words (`daily`) have no fixed length.
DURATION = re.compile(r"^\d{1,9}[smhdw]$")
MAX_LISTED = 100

_MONEY_HINT = ("Berth counts tokens, not money: use tpm_limit (tokens per minute) or max_parallel_requests, "
               "or a lifetime request quota with `berth key create --request-quota N`.")
_TEAMS_HINT = "Berth scopes a key to this endpoint (and one model), not to LiteLLM users, teams or projects."
_ONE_MODEL_HINT = "Berth keys hold one model: send models: [M] with tpm_limit."
REFUSALS: dict[str, str] = {
    **dict.fromkeys(("max_budget", "soft_budget", "spend", "budget_duration", "budget_limits", "budget_id",
                     "model_max_budget", "budget_fallbacks", "temp_budget_increase", "temp_budget_expiry",
                     "throttle_on_budget_exceeded", "end_user_budget_id"), _MONEY_HINT),
    "rpm_limit": "Berth keys have no requests-per-minute limit: use tpm_limit or max_parallel_requests, or a "
                 "lifetime request quota with `berth key create --request-quota N`.",
    "metadata": "Berth keys keep no metadata: name the key with key_alias.",
    "key": "Berth generates the key itself: leave key out.",
    "new_key": "Berth generates the new secret itself: leave new_key out.",
    "new_master_key": "The master key is the workflow's ApiKey or ApiKeySecret; Berth does not change it here.",
    **dict.fromkeys(("user_id", "team_id", "organization_id", "project_id", "agent_id", "access_group_ids"),
                    _TEAMS_HINT),
    **dict.fromkeys(("model_tpm_limit", "model_rpm_limit"), _ONE_MODEL_HINT),
}
# The rest of LiteLLM's GenerateKeyRequest / RegenerateKeyRequest (LiteLLM 1.108.7): known, so an empty
# default passes, and refused when set.
KNOWN = frozenset(REFUSALS) | frozenset(MAPPED) | {
    "allowed_cache_controls", "config", "permissions", "mcp_rpm_limit", "tag_rpm_limit", "guardrails",
    "policies", "prompts", "blocked", "aliases", "object_permission", "tpd_limit",
    "default_estimated_output_tokens", "default_estimated_output_tokens_per_model", "tags",
    "disable_global_guardrails", "enable_prompt_caching", "enforced_params", "allowed_routes",
    "allowed_passthrough_routes", "denied_passthrough_routes", "allowed_vector_store_indexes", "rpm_limit_type",
    "tpm_limit_type", "router_settings", "send_invite_email", "key_type", "auto_rotate", "rotation_interval",
    "grace_period",
}


@dataclass(frozen=True)
class GenerateFields:
    """A `/key/generate` body in Berth's terms; None: not asked for."""

    name: str | None
    duration: str | None
    model: str | None
    max_concurrent: int | None
    tokens_per_minute: int | None


def _empty(name: str, value: Any) -> bool:
    if value is None or value is False or (isinstance(value, str | list | dict) and not value):
        return True
    return (name == "spend" and value == 0) or (name == "key_type" and value in ("default", "llm_api"))


def _refuse_unmapped(body: dict[str, Any], allowed: tuple[str, ...], route: str) -> None:
    for name, value in body.items():
        if name in allowed:
            continue
        if name not in KNOWN:
            raise UserInputError(f"Unknown field '{shown(name, 64)}': Berth's {route} takes "
                                 f"{', '.join(allowed)}.")
        if _empty(name, value):
            continue
        if name in REFUSALS:
            raise UserInputError(f"{name}: {REFUSALS[name]}")
        if name in MAPPED:
            raise UserInputError(f"{name}: {route} keeps the key's settings; to change them, /key/generate a "
                                 "new key and /key/delete this one.")
        raise UserInputError(f"{name} is a LiteLLM key setting Berth does not map; Berth's {route} takes "
                             f"{', '.join(allowed)}.")


def _text(body: dict[str, Any], name: str, limit: int) -> str | None:
    value = body.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise UserInputError(f"{name} must be a string of at most {limit} characters.")
    return value.strip()


def _positive(body: dict[str, Any], name: str) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserInputError(f"{name} must be a whole number of at least 1 (leave it out for no limit).")
    return value


def duration(body: dict[str, Any], name: str) -> str | None:
    value = _text(body, name, 64)
    if value is not None and not DURATION.match(value):
        raise UserInputError(f"{name} '{shown(value, 32)}' is not a duration like 30m, 1h or 30d "
                             "(Berth has no months: use 30d).")
    return value


def _model(body: dict[str, Any]) -> str | None:
    models = body.get("models")
    if models is None:
        return None
    if not isinstance(models, list) or not all(isinstance(m, str) and 0 < len(m) <= 256 for m in models):
        raise UserInputError("models must be a list of model names.")
    wanted = [m for m in dict.fromkeys(models) if m != ALL_MODELS]
    if len(wanted) > 1:
        raise UserInputError(f"models: a Berth key holds one model (or all of the endpoint's), not {len(wanted)}; "
                             "generate one key per model.")
    return wanted[0] if wanted else None


def generate_fields(body: dict[str, Any]) -> GenerateFields:
    _refuse_unmapped(body, MAPPED, "/key/generate")
    return GenerateFields(name=_text(body, "key_alias", 128), duration=duration(body, "duration"),
                          model=_model(body), max_concurrent=_positive(body, "max_parallel_requests"),
                          tokens_per_minute=_positive(body, "tpm_limit"))


def regenerate_fields(body: dict[str, Any], path_key: str | None) -> tuple[str, str | None]:
    """The key to regenerate (the path's, else the body's) and the grace period its old secret keeps."""
    _refuse_unmapped(body, ("key", "grace_period"), "/key/regenerate")
    key = path_key or _text(body, "key", 4096)
    if not key:
        raise UserInputError("No key passed in: name it in the path (/key/{key}/regenerate) or as key.")
    return key, duration(body, "grace_period")


def delete_fields(body: dict[str, Any]) -> tuple[list[str], bool]:
    """The keys (or aliases) to delete, and whether they are aliases."""
    _refuse_unmapped(body, ("keys", "key_aliases"), "/key/delete")
    keys, aliases = body.get("keys") or [], body.get("key_aliases") or []
    if bool(keys) == bool(aliases):
        raise UserInputError("Send one of 'keys' or 'key_aliases' (a list), not both and not neither.")
    named = keys or aliases
    if not isinstance(named, list) or len(named) > MAX_LISTED or \
            not all(isinstance(k, str) and 0 < len(k) <= 4096 for k in named):
        raise UserInputError(f"keys and key_aliases are lists of at most {MAX_LISTED} strings.")
    return named, bool(aliases)
