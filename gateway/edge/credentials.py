"""Strip every Berth credential from a request before it leaves Berth for a model service: a model's
owner runs that service, and a user's API token, another endpoint's token, a Berth API key or the console
cookie would let them act as the caller on the control plane (issue 11 item 6); and find the caller's
token or API key among the headers."""

from __future__ import annotations

import contextlib
from http.cookies import CookieError, SimpleCookie

from berth.api_keys import looks_like_key
from berth.security import TokenVerifier

COOKIE_NAME = "berth_token"
# Where clients put an API key: OpenAI's SDKs and curl in Authorization, LiteLLM's in the other two.
KEY_HEADERS = (b"authorization", b"x-api-key", b"x-litellm-api-key")
# A Berth key minted through LiteLLM's /key/generate contract reads `sk-bk_…`: LiteLLM's clients expect sk-.
LITELLM_FORM = "sk-bk_"
# What every credential to strip holds: a key starts `bk_` (or `sk-bk_`), a Berth token `eyJ` (a JWT's header).
KEY_MARK, TOKEN_MARK = b"bk_", b"eyJ"


def berth_key(credential: str) -> str | None:
    """The Berth API key a credential holds, in its plain `bk_…` form; None when it holds none."""
    if credential.startswith(LITELLM_FORM):
        credential = credential[3:]
    return credential if looks_like_key(credential) else None


def find_key(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The Berth API key the caller presents (`bk_…` or `sk-bk_…`, bare or after `Bearer`) in the first
    of Authorization, x-api-key, x-litellm-api-key that holds one."""
    found: dict[bytes, str] = {}
    for name, value in headers:
        if name in KEY_HEADERS and name not in found and KEY_MARK in value:
            key = berth_key(_credential(value))
            if key is not None:
                found[name] = key
    return next((found[name] for name in KEY_HEADERS if name in found), None)


def _credential(value: bytes) -> str:
    text = value.decode("latin-1").strip()
    return text[7:].strip() if text[:7].lower() == "bearer " else text


def _without_berth_cookies(value: bytes, verifier: TokenVerifier) -> bytes | None:
    """The Cookie header less `berth_token` and any cookie holding a Berth token; None if none is left."""
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(value.decode("latin-1"))
    except CookieError:
        return None  # unparseable: it might hide one, and a model service has no use for Berth's cookies
    kept = [f"{name}={morsel.coded_value}" for name, morsel in jar.items()
            if name != COOKIE_NAME and not verifier.issued(morsel.value) and berth_key(morsel.value) is None]
    return "; ".join(kept).encode("latin-1") if kept else None


def strip_berth_credentials(headers: list[tuple[bytes, bytes]],
                            verifier: TokenVerifier) -> list[tuple[bytes, bytes]]:
    """`headers` without any value that is a Berth token or API key, whatever its audience and header: keys
    go in Authorization, x-api-key, x-litellm-api-key and more (LiteLLM reads six), so every header is
    looked at. A service key (sk-… but not sk-bk_…) and other cookies stay."""
    kept: list[tuple[bytes, bytes]] = []
    for item in headers:
        if KEY_MARK in item[1] or TOKEN_MARK in item[1] or item[0] == b"cookie":
            cleaned = without_berth_credential(item, verifier)
            if cleaned is not None:
                kept.append(cleaned)
        else:
            kept.append(item)  # nothing to decode: the common case
    return kept


def without_berth_credential(item: tuple[bytes, bytes], verifier: TokenVerifier) -> tuple[bytes, bytes] | None:
    """One header less any Berth token or API key it holds: as it is, a Cookie less Berth's cookies, or None
    when nothing of it may leave Berth. A value holding neither KEY_MARK nor TOKEN_MARK (most: host, user-agent,
    content-type…) need not be decoded: the credential `_credential` reads out of a value is a slice of it
    (latin-1 maps each byte to one character), and a key starts `bk_` (or `sk-bk_`), a Berth token `eyJ`."""
    name, value = item
    if name == b"cookie":
        cookies = _without_berth_cookies(value, verifier)
        return (name, cookies) if cookies is not None else None
    if KEY_MARK not in value and TOKEN_MARK not in value:
        return item
    if berth_key(credential := _credential(value)) is not None or verifier.issued(credential):
        return None
    return item


def find_token(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, bool]:
    """The caller's Berth token from the first of: console cookie, `Berth-Authorization`,
    `Authorization: Bearer`. Returns (token, whether it came from Authorization)."""
    cookie = berth_header = bearer = None
    for name, value in headers:
        if name == b"cookie" and cookie is None:
            jar: SimpleCookie = SimpleCookie()
            with contextlib.suppress(Exception):
                jar.load(value.decode("latin-1"))
            if COOKIE_NAME in jar:
                cookie = jar[COOKIE_NAME].value
        elif name == b"berth-authorization" and berth_header is None:
            text = value.decode("latin-1").strip()
            berth_header = text[7:].strip() if text.lower().startswith("bearer ") else text
        elif name == b"authorization" and bearer is None:
            text = value.decode("latin-1").strip()
            if text.lower().startswith("bearer "):
                bearer = text[7:].strip()
    if cookie:
        return cookie, False
    if berth_header:
        return berth_header, False
    return bearer, bearer is not None
