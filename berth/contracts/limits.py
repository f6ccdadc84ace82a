"""The gateway's limits as a typed policy: per-scope request, token and concurrency limits, a daily token
budget, size caps, a context check, the body limit and load shedding. Every field None: that limit is off
(the body limit alone is on by default). The cluster's policy comes from `BERTH_LIMITS_FILE`
(berth.settings); an endpoint's `limits` annotation overrides it field by field (`LimitPolicy.merged`)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, ValidationError

from berth.contracts.base import Payload
from berth.errors import UserInputError

DEFAULT_BODY_LIMIT_BYTES = 1024 * 1024

# The scopes a request is counted in, in the order they are checked: the field names of LimitPolicy
# (`global` is a Python keyword: the field is `global_`, read and written as `global`).
SCOPES = ("global", "org", "group", "model", "user", "project", "session")


class _Strict(Payload):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True, protected_namespaces=())


class ScopeLimits(_Strict):
    """One scope's limits, counted per member of the scope (per user, per group, ...) in one fixed
    one-minute window (the epoch minute); `concurrent`: requests in flight at once. None: off."""

    requests_per_minute: int | None = Field(default=None, ge=1)
    tokens_per_minute: int | None = Field(default=None, ge=1, description="Refused once the tokens the scope's answers "
                                          "used this minute reach it (tokens are charged after each answer)")
    concurrent: int | None = Field(default=None, ge=1)

    def merged(self, override: ScopeLimits) -> ScopeLimits:
        """The fields `override` sets (an explicit null too: that turns the limit off) win."""
        if not override.model_fields_set:
            return self
        return self.model_copy(update={name: getattr(override, name) for name in override.model_fields_set})

    def any_set(self) -> bool:
        return any(value is not None for value in (self.requests_per_minute, self.tokens_per_minute,
                                                   self.concurrent))


class LimitPolicy(_Strict):
    """The limits one request is admitted under. Counted limits (the scopes, the daily budgets) set in the
    cluster's policy count across every endpoint; set in an endpoint's override they count within that
    endpoint alone."""

    global_: ScopeLimits = Field(default_factory=ScopeLimits, alias="global",
                                 description="Every request (of the cluster, or of the endpoint when overridden)")
    org: ScopeLimits = Field(default_factory=ScopeLimits)
    group: ScopeLimits = Field(default_factory=ScopeLimits, description="Per group; a caller in several "
                               "groups is counted in each")
    model: ScopeLimits = Field(default_factory=ScopeLimits)
    user: ScopeLimits = Field(default_factory=ScopeLimits)
    project: ScopeLimits = Field(default_factory=ScopeLimits, description="Per `x-project-id`; a request "
                                 "without one is not counted here")
    session: ScopeLimits = Field(default_factory=ScopeLimits, description="Per `x-session-id`; a request "
                                 "without one is not counted here")
    daily_tokens_per_user: int | None = Field(default=None, ge=1, description="Tokens one user's answers may use per "
                                              "UTC day; refused once reached, until midnight UTC")
    daily_tokens_per_key: int | None = Field(default=None, ge=1, description="Tokens one API key's answers may use "
                                             "per UTC day; refused once reached, until midnight UTC")
    max_prompt_tokens: int | None = Field(default=None, ge=1, description="Cap on the prompt, estimated as its "
                                          "characters / 4")
    max_tokens: int | None = Field(default=None, ge=1, description="Cap on the request's `max_tokens`")
    context_check: bool | None = Field(default=None, description="Refuse when the prompt estimate + `max_tokens` "
                                       "exceeds the served MaxContextSize (when known)")
    body_limit_bytes: int | None = Field(default=DEFAULT_BODY_LIMIT_BYTES, ge=1, description="Largest request body; "
                                         "on by default (1 MiB)")
    shed_queue_depth: float | None = Field(default=None, gt=0, description="Load shedding: refuse when every ready "
                                           "copy's queue depth is above this × ½ / 1 / 2 for priority "
                                           "low / normal / high")
    high_priority: bool | None = Field(default=None, description="Whether a caller's `x-request-priority: high` "
                                       "is granted (load shedding waits twice as long for it); off by default: "
                                       "an ungranted high counts as normal and the answer says so in "
                                       "`x-berth-priority`")

    def scope(self, name: str) -> ScopeLimits:
        limits: ScopeLimits = getattr(self, "global_" if name == "global" else name)
        return limits

    def merged(self, override: LimitPolicy | None) -> LimitPolicy:
        """This policy with the fields `override` sets (an explicit null too: off) winning, field by field
        and, in a scope, limit by limit."""
        if override is None or not override.model_fields_set:
            return self
        update: dict[str, Any] = {}
        for name in override.model_fields_set:
            value = getattr(override, name)
            update[name] = getattr(self, name).merged(value) if isinstance(value, ScopeLimits) else value
        return self.model_copy(update=update)

    def set_by(self, name: str, limit: str | None = None) -> bool:
        """Whether this (override) policy sets field `name` (for a scope: its limit `limit`)."""
        field = "global_" if name == "global" else name
        if field not in self.model_fields_set:
            return False
        return limit is None or limit in self.scope(name).model_fields_set

    def loosening(self, override: LimitPolicy) -> str | None:
        """How `override` would loosen this (cluster) policy, in one line naming the field and this policy's
        value; None: it only tightens. A counted limit this policy sets cannot be overridden at all: the
        override's count, per endpoint, would replace the count across every endpoint (gateway/endpoint/limits.py),
        so an endpoint would escape the cluster's shared count even with a lower number."""
        for scope in SCOPES:
            limits = self.scope(scope)
            for name in ("requests_per_minute", "tokens_per_minute", "concurrent"):
                if getattr(limits, name) is not None and override.set_by(scope, name):
                    return _counted_refusal(f"{scope}.{name}", getattr(limits, name))
        for name in ("daily_tokens_per_user", "daily_tokens_per_key"):
            if getattr(self, name) is not None and override.set_by(name):
                return _counted_refusal(name, getattr(self, name))
        for name in ("body_limit_bytes", "max_prompt_tokens", "max_tokens", "shed_queue_depth"):
            mine, theirs = getattr(self, name), getattr(override, name)
            if mine is not None and override.set_by(name) and (theirs is None or theirs > mine):
                return f"{name}: {_shown(theirs)} is looser than the cluster's {mine}; at most {mine} (or unset)."
        if self.context_check and override.set_by("context_check") and not override.context_check:
            return "context_check: the cluster turns it on; an endpoint cannot turn it off."
        return None


def limit_policy_from(data: object, where: str) -> LimitPolicy:
    """`data` (a mapping read from a file or an annotation) as a LimitPolicy, or a one-line error naming
    `where` and the first field at fault."""
    if not isinstance(data, dict):
        raise UserInputError(f"{where}: the limits must be a mapping of limit names to values, "
                             f"not {type(data).__name__}.")
    try:
        return LimitPolicy.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        path = ".".join(str(part) for part in first["loc"]) or "(top)"
        more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
        raise UserInputError(f"{where}: {path}: {first['msg']}{more}.") from None


def endpoint_limits(annotation: object) -> LimitPolicy | None:
    """An endpoint's `limits` annotation as its override (None: none given), or a one-line error."""
    if annotation is None:
        return None
    return limit_policy_from(annotation, "the endpoint's `limits` annotation")


def _counted_refusal(name: str, value: object) -> str:
    return (f"{name}: the cluster counts it across every endpoint ({value}); an endpoint's own count would "
            "replace that count, so only an administrator may override it.")


def _shown(value: object) -> str:
    return "null (off)" if value is None else str(value)
