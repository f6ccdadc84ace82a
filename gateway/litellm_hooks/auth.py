"""LiteLLM custom auth: admit a Berth caller on its signed assertion, or let the LiteLLM key decide."""

# Runs inside the LiteLLM proxy process (the .venv-litellm interpreter): it may import only what
# that venv has — litellm, fastapi/starlette, pyjwt, cryptography, httpx, pydantic, the stdlib.
#
# Wiring (rendered by activities.litellm_service):
#   general_settings:
#     custom_auth: gateway.litellm_hooks.auth.user_api_key_auth
#     custom_auth_settings: {mode: auto}
# In `auto` mode (litellm_enterprise/proxy/auth/user_api_key_auth.py, enterprise_custom_auth) a
# returned UserAPIKeyAuth admits the request as is, a ProxyException goes back to the client as is,
# and any other exception falls through to LiteLLM's own key check. `mode: on` would turn the
# fall-through into a 401, so the master key would stop working: keep `auto`.

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Final

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from fastapi import Request
from jwt import PyJWK, PyJWKClient, PyJWKSet
from litellm.proxy._types import ProxyErrorTypes, ProxyException
from litellm.proxy.auth.auth_utils import get_request_route
from litellm.types.proxy.auth.user_api_key_auth import UserAPIKeyAuth
from litellm.types.proxy.auth.user_roles import LitellmUserRoles
from starlette.datastructures import State

from berth.settings import litellm_assertion_settings
from gateway.edge.litellm_contract import INVALID_KEY_MESSAGE, NO_KEY_MESSAGE
from gateway.litellm_hooks.api_tls import api_ssl_context

ASSERTION_HEADER: Final = "x-berth-caller"
ASSERTION_ISSUER: Final = "berth"
ASSERTION_ALGORITHM: Final = "EdDSA"
# The endpoint proxy mints a fresh assertion per request; a long-lived one is a replayable credential.
MAX_ASSERTION_LIFETIME_S: Final = 60
CLOCK_LEEWAY_S: Final = 5
# A JWKS fetch runs in a worker thread; a short timeout bounds how long one request can wait on it.
JWKS_TIMEOUT_S: Final = 2.0
# How long a fetched key set is trusted: a withdrawn key stops verifying within this time.
JWKS_CACHE_S: Final = 60.0
# After a failed fetch, answer without the network for a while so an outage of the control plane
# does not make every keyless request wait JWKS_TIMEOUT_S.
JWKS_RETRY_AFTER_FAILURE_S: Final = 5.0
# An unknown `kid` forces a refetch at most this often, so forged kids cannot hammer the JWKS.
JWKS_UNKNOWN_KID_COOLDOWN_S: Final = 10.0
VERIFIED_KEPT: Final = 10_000  # distinct verified assertions kept; cleared when full rather than grown


# The OpenAI inference surface an assertion admits; every other route (/key/*, /user/*, /model/*,
# /team/*, /config/*, /global/*, /spend/*, ...) needs the master key. LiteLLM does not block admin
# routes for custom-auth callers on its own, so this list is the only thing that does.
ASSERTION_ROUTES: Final = frozenset(
    {
        "/v1/models",
        "/models",
        "/v1/chat/completions",
        "/chat/completions",
        "/v1/completions",
        "/completions",
        "/v1/embeddings",
        "/embeddings",
    }
)
ASSERTION_ROUTE_PREFIXES: Final = ("/v1/models/", "/models/", "/health")

_VERIFIER_STATE_KEY: Final = "berth_assertion_verifier"

# A child of LiteLLM's proxy logger, so its lines reach LiteLLM's handler. It never logs a key or a token.
logger: Final = logging.getLogger("LiteLLM Proxy").getChild("berth_auth")


class FallBackToLiteLLMKeyCheck(Exception):  # noqa: N818 — a signal to LiteLLM's auto mode, not an error
    """Raised to let LiteLLM's own key check decide (custom_auth_settings.mode must be `auto`)."""


@dataclass(frozen=True, slots=True)
class Caller:
    """Who the endpoint proxy says is calling: the verified claims of one assertion."""

    subject: str
    groups: tuple[str, ...]
    organization: str | None


class AssertionVerifier:
    """Verifies `x-berth-caller` assertions against the control plane's published JWKS."""

    def __init__(self, jwks_url: str, audience: str) -> None:
        self._audience: Final = audience
        self._jwks: Final = PyJWKClient(
            jwks_url,
            cache_keys=False,  # its LRU never expires, so a withdrawn key would stay trusted
            cache_jwk_set=True,
            lifespan=JWKS_CACHE_S,
            timeout=JWKS_TIMEOUT_S,
            cooldown_duration=JWKS_UNKNOWN_KID_COOLDOWN_S,
            ssl_context=api_ssl_context(os.environ),  # the control plane's private CA, when it has one
        )
        self._unreachable_until = 0.0
        # Assertions already verified, until their `exp` (and never past the key set's own trust window): the
        # proxy reuses one per caller for up to 30 s, and an EdDSA check is most of this hook's cost.
        self._verified: dict[str, tuple[Caller, float]] = {}
        # The last key set fetched: used while the control plane cannot be reached ("fail static", like
        # the replica sync), so an API outage does not turn every identified caller into a 401.
        self._last_good: PyJWKSet | None = None

    async def warm_up(self) -> None:
        """Fetch the key set once at start-up, so serving survives a control plane that goes away
        before the first identified request."""
        try:
            key_set: Final = await asyncio.to_thread(self._jwks.get_jwk_set)
        except jwt.PyJWTError as error:
            logger.debug("caller assertion JWKS not fetched at start-up: %s", type(error).__name__)
            return
        self._last_good = key_set

    async def verify(self, token: str) -> Caller | None:
        """Return the caller, or None for any assertion that does not verify (never raises)."""
        kept: Final = self._verified.get(token)
        if kept is not None and kept[1] > time.time():
            return kept[0]
        verified: Final = await self._verify(token)
        if verified is None:
            return None
        if len(self._verified) >= VERIFIED_KEPT:
            self._verified.clear()
        self._verified[token] = verified
        return verified[0]

    async def _verify(self, token: str) -> tuple[Caller, float] | None:
        try:
            header: Final = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            logger.debug("caller assertion refused: malformed")
            return None
        kid: Final = header.get("kid")
        if header.get("alg") != ASSERTION_ALGORITHM or not isinstance(kid, str) or not kid:
            logger.debug("caller assertion refused: unexpected alg or no kid")
            return None
        signing_key: Final = await self._signing_key(kid)
        if signing_key is None or not isinstance(signing_key.key, Ed25519PublicKey):
            logger.debug("caller assertion refused: no Ed25519 key for its kid")
            return None
        try:
            claims: Final[dict[str, Any]] = jwt.decode(
                token,
                key=signing_key.key,
                algorithms=[ASSERTION_ALGORITHM],
                audience=self._audience,
                issuer=ASSERTION_ISSUER,
                leeway=CLOCK_LEEWAY_S,
                options={"require": ["exp", "iss", "aud", "sub"]},
            )
        except jwt.PyJWTError as error:
            logger.debug("caller assertion refused: %s", type(error).__name__)
            return None
        caller: Final = _caller_from_claims(claims)
        if caller is None:
            return None
        return caller, min(float(claims["exp"]), time.time() + JWKS_CACHE_S)

    async def _signing_key(self, kid: str) -> PyJWK | None:
        # The common case answers from the cached key set without leaving the event loop.
        cache: Final = self._jwks.jwk_set_cache
        cached_set: Final = cache.get() if cache is not None else None
        if cached_set is not None:
            cached_key: Final = _match_kid(cached_set, kid)
            if cached_key is not None:
                return cached_key
        if time.monotonic() < self._unreachable_until:
            # Fail static for the whole retry window, not only for the request that found it unreachable:
            # the chaos soak saw every identified caller get 401 in the seconds after the API was killed.
            return _match_kid(self._last_good, kid) if self._last_good is not None else None
        try:
            # PyJWKClient fetches with blocking urllib: keep that off the event loop.
            found: Final = await asyncio.to_thread(self._jwks.get_signing_key, kid)
            fresh: Final = cache.get() if cache is not None else None
            if fresh is not None:
                self._last_good = fresh
            return found
        except jwt.PyJWKClientConnectionError:
            self._unreachable_until = time.monotonic() + JWKS_RETRY_AFTER_FAILURE_S
            stale: Final = _match_kid(self._last_good, kid) if self._last_good is not None else None
            if stale is not None:
                logger.warning("caller assertion JWKS unreachable; using the key set last fetched")
                return stale
            logger.warning("caller assertion JWKS unreachable; keyless requests get 401 until it answers")
            return None
        except jwt.PyJWTError:
            return None


def _match_kid(key_set: PyJWKSet, kid: str) -> PyJWK | None:
    for key in key_set.keys:
        if key.key_id == kid and key.public_key_use in ("sig", None):
            return key
    return None


def _caller_from_claims(claims: dict[str, Any]) -> Caller | None:
    subject: Final = claims.get("sub")
    groups: Final = claims.get("groups", [])
    organization: Final = claims.get("org")
    expires_in: Final = float(claims["exp"]) - time.time()
    if expires_in > MAX_ASSERTION_LIFETIME_S + CLOCK_LEEWAY_S:
        logger.debug("caller assertion refused: expires too far ahead")
        return None
    if not isinstance(subject, str) or not subject:
        return None
    if not isinstance(groups, list) or not all(isinstance(group, str) for group in groups):
        return None
    if organization is not None and not isinstance(organization, str):
        return None
    return Caller(subject=subject, groups=tuple(groups), organization=organization)


def _verifier(state: State) -> AssertionVerifier | None:
    """The process's verifier, kept on the app state; None when assertions are off."""
    verifier: AssertionVerifier | None = getattr(state, _VERIFIER_STATE_KEY, None)
    if verifier is None:
        jwks_url, audience = litellm_assertion_settings()
        # Without a published key set, or without an audience to bind to, no assertion can be trusted.
        if not jwks_url or not audience:
            return None
        verifier = AssertionVerifier(jwks_url, audience)
        setattr(state, _VERIFIER_STATE_KEY, verifier)
    return verifier


async def warm_up(state: State) -> None:
    """Start-up: fetch the caller-assertion keys once (no-op when assertions are off)."""
    verifier: Final = _verifier(state)
    if verifier is not None:
        await verifier.warm_up()


def assertion_admits_route(route: str) -> bool:
    """True for the OpenAI inference and health routes a caller assertion may reach."""
    return route in ASSERTION_ROUTES or route.startswith(ASSERTION_ROUTE_PREFIXES)


def _auth_error(message: str, status_code: int) -> ProxyException:
    # Shaped like LiteLLM's own auth errors: {"error": {"message", "type": "auth_error", "param": "None",
    # "code": "<status>"}}.
    return ProxyException(message=message, type=ProxyErrorTypes.auth_error, param="None", code=status_code)


def _let_the_key_decide(api_key: str) -> None:
    """Always raises: a fall-through for a key LiteLLM will accept, a 401 for one it cannot."""
    from litellm.proxy import proxy_server

    # With a database LiteLLM knows virtual keys and answers a wrong one with its own 401.
    if proxy_server.prisma_client is not None:
        raise FallBackToLiteLLMKeyCheck("a database is configured: LiteLLM checks the key")
    master_key: Final = proxy_server.master_key
    # Without a database LiteLLM answers any key but the master key with 400 "No connected db."
    # (user_api_key_auth.py, `prisma_client is None` branch); the documents promise a 401.
    if isinstance(master_key, str) and hmac.compare_digest(api_key.encode(), master_key.encode()):
        raise FallBackToLiteLLMKeyCheck("the master key: LiteLLM admits it as the proxy admin")
    raise _auth_error(INVALID_KEY_MESSAGE, 401)


async def user_api_key_auth(request: Request, api_key: str | None) -> UserAPIKeyAuth:
    """LiteLLM `custom_auth` hook: a sent key decides; otherwise the caller assertion does."""
    # `api_key` is what LiteLLM extracted from x-litellm-api-key (which wins), Authorization,
    # api-key, x-api-key, x-goog-api-key or Ocp-Apim-Subscription-Key.
    if api_key:
        _let_the_key_decide(api_key)
    token: Final = request.headers.get(ASSERTION_HEADER, "")
    verifier: Final = _verifier(request.app.state) if token else None
    caller: Final = await verifier.verify(token) if verifier is not None else None
    if caller is None:
        raise _auth_error(NO_KEY_MESSAGE, 401)
    route: Final = get_request_route(request)
    if not assertion_admits_route(route):
        raise _auth_error(f"user not allowed to access this route. Route={route} is an admin only route", 403)
    return UserAPIKeyAuth(
        user_id=caller.subject,
        org_id=caller.organization,
        user_role=LitellmUserRoles.INTERNAL_USER,
        metadata={"berth_groups": list(caller.groups)},
    )
