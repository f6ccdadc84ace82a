"""The endpoint proxy's identity handling in process: token parsing (property-tested), caller
assertions (added, cached, client copies stripped), Basic pass-through, scopes and their 401/403."""

from __future__ import annotations

import asyncio
import base64
import string
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from berth.contracts import RoutesTable
from berth.security import Identity, SigningKey, TokenVerifier
from gateway.edge.credentials import COOKIE_NAME, find_token
from gateway.endpoint.endpoint_proxy import EndpointProxy

OWNER = Identity("alice", ("eng",), "acme")


class FakeApi:
    def __init__(self, endpoints: list[dict[str, Any]]) -> None:
        self.endpoints = endpoints

    async def routes(self) -> RoutesTable:
        return RoutesTable.model_validate({"endpoints": self.endpoints})

    async def aclose(self) -> None:
        pass


class FakeResponse:
    status = 200
    headers: list[tuple[bytes, bytes]] = [(b"content-type", b"text/plain")]
    ends = False  # as UpstreamResponse: whether the chunk just given was the body's last (not known here)
    unfinished = False  # as UpstreamResponse: its body came whole with its head

    async def body(self) -> AsyncIterator[bytes]:
        yield b"ok"

    def take_whole(self) -> bytes | None:
        return b"ok"  # as UpstreamResponse: the whole body, as it came with its head

    def release(self) -> None:
        pass


class RecordingUpstream:
    """Stands in for UpstreamPool: records what the proxy forwarded."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, list[tuple[bytes, bytes]]]] = []

    async def request(self, method: str, url: str, headers: list[tuple[bytes, bytes]],
                      body: Any) -> FakeResponse:
        self.seen.append((url, headers))
        return FakeResponse()

    async def aclose(self) -> None:
        pass


def endpoint(id_: str, scope: str, service_url: str | None = "http://service") -> dict[str, Any]:
    return {"id": id_, "scope": scope, "owner": OWNER.user, "org": OWNER.org, "groups": list(OWNER.groups),
            "service": "litellm", "service_url": service_url, "replicas": []}


@pytest.fixture()
def key(tmp_path: Path) -> SigningKey:
    return SigningKey.load_or_create(tmp_path)


def make_proxy(key: SigningKey, *endpoints: dict[str, Any]) -> tuple[EndpointProxy, RecordingUpstream]:
    upstream = RecordingUpstream()
    proxy = EndpointProxy(FakeApi(list(endpoints)), TokenVerifier.from_jwks(key.jwks()),  # type: ignore[arg-type]
                          upstream=upstream, signer=key)  # type: ignore[arg-type]
    asyncio.run(proxy.refresh())
    return proxy, upstream


def call(proxy: EndpointProxy, path: str, headers: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "method": "GET", "headers": headers, "query_string": b""}
    asyncio.run(proxy(scope, receive, send))
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def header(headers: list[tuple[bytes, bytes]], name: bytes) -> list[bytes]:
    return [v for k, v in headers if k == name]


def test_assertion_added_cached_and_client_copy_stripped(key: SigningKey) -> None:
    proxy, upstream = make_proxy(key, endpoint("ep-1", "group"))
    token = key.endpoint_token(OWNER, "ep-1", 3600)
    forged = SigningKey(Ed25519PrivateKey.generate(), "forger").caller_assertion(OWNER, "ep-1")
    for _ in range(2):
        sent = [(b"authorization", f"Bearer {token}".encode()), (b"x-berth-caller", forged.encode())]
        status, _body = call(proxy, "/endpoints/ep-1/v1/models", sent)
        assert status == 200
    (_, first), (_, second) = upstream.seen
    assert header(first, b"authorization") == []  # the Berth token is consumed
    assertions = header(first, b"x-berth-caller")
    assert len(assertions) == 1 and assertions[0] != forged.encode()
    assert header(second, b"x-berth-caller") == assertions  # reused, not signed per request
    claims = jwt.decode(assertions[0], key.public, algorithms=["EdDSA"], audience="ep-1")
    assert (claims["sub"], claims["groups"], claims["org"]) == ("alice", ["eng"], "acme")
    assert claims["exp"] - claims["iat"] <= 60


def test_basic_authorization_passes_through_with_berth_authorization(key: SigningKey) -> None:
    # An OpenCode service endpoint: its web app's paths go through (only a model copy's are allow-listed).
    proxy, upstream = make_proxy(key, {**endpoint("ep-1", "user"), "service": "opencode"})
    token = key.endpoint_token(OWNER, "ep-1", 3600)
    basic = b"Basic " + base64.b64encode(b"opencode:password")
    sent = [(b"authorization", basic), (b"berth-authorization", token.encode())]
    status, _ = call(proxy, "/endpoints/ep-1/x", sent)
    assert status == 200
    headers = upstream.seen[0][1]
    assert header(headers, b"authorization") == [basic]
    assert header(headers, b"berth-authorization") == []


@pytest.mark.parametrize(("scope", "caller", "expected"), [
    ("user", Identity("bob", ("eng",), "acme"), 403),
    ("group", Identity("carol", ("ops",), "acme"), 403),
    ("organization", Identity("dave", ("eng",), "other"), 403),
    ("organization", Identity("carol", ("ops",), "acme"), 200),
])
def test_scope_decides_and_403_names_it(key: SigningKey, scope: str, caller: Identity, expected: int) -> None:
    proxy, _ = make_proxy(key, endpoint("ep-1", scope))
    token = key.endpoint_token(caller, "ep-1", 3600)
    status, body = call(proxy, "/endpoints/ep-1/v1/models", [(b"authorization", f"Bearer {token}".encode())])
    assert status == expected
    if expected == 403:
        assert f"{scope}-scoped".encode() in body


def test_public_identifies_only_callers_of_its_organization(key: SigningKey) -> None:
    proxy, upstream = make_proxy(key, endpoint("ep-1", "public"))
    for caller in (Identity("carol", (), "acme"), Identity("dave", (), "other")):
        token = key.endpoint_token(caller, "ep-1", 3600)
        status, _ = call(proxy, "/endpoints/ep-1/v1/models", [(b"authorization", f"Bearer {token}".encode())])
        assert status == 200
    same_org, other_org = (headers for _, headers in upstream.seen)
    assert len(header(same_org, b"x-berth-caller")) == 1
    assert header(other_org, b"x-berth-caller") == []
    assert header(other_org, b"authorization") == []  # a valid Berth token is still consumed


def test_a_revoked_token_is_refused_and_identifies_nobody_on_a_public_endpoint(key: SigningKey) -> None:
    """Issue 31, item 10: the routes table's `revoked_tokens` outweighs a valid signature (401 as for any
    invalid token); on a public endpoint the request passes as anyone's, with no caller assertion."""
    tokens = {endpoint_id: key.endpoint_token(OWNER, endpoint_id, 3600) for endpoint_id in ("ep-1", "ep-2")}
    revoked = {endpoint_id: [jwt.decode(token, options={"verify_signature": False})["jti"]]
               for endpoint_id, token in tokens.items()}
    proxy, upstream = make_proxy(key, {**endpoint("ep-1", "group"), "revoked_tokens": revoked["ep-1"]},
                                 {**endpoint("ep-2", "public"), "revoked_tokens": revoked["ep-2"]})
    status, body = call(proxy, "/endpoints/ep-1/v1/models", [(b"authorization", f"Bearer {tokens['ep-1']}".encode())])
    assert (status, body) == (401, b"Unauthorized") and upstream.seen == []
    status, _ = call(proxy, "/endpoints/ep-2/v1/models", [(b"authorization", f"Bearer {tokens['ep-2']}".encode())])
    assert status == 200
    (_, forwarded), = upstream.seen
    assert header(forwarded, b"x-berth-caller") == [] and header(forwarded, b"authorization") == []


def test_pool_behind_litellm_is_never_reached_around_it(key: SigningKey) -> None:
    route = endpoint("ep-1", "public", service_url=None)
    route["replicas"] = ["http://replica"]
    proxy, upstream = make_proxy(key, route)
    status, _ = call(proxy, "/endpoints/ep-1/v1/models", [])
    assert status == 503 and upstream.seen == []


# --- find_token, property-tested --------------------------------------------------------------------
TOKEN = st.text(alphabet=string.ascii_letters + string.digits + "-_.", min_size=1, max_size=40)
NOISE = st.lists(st.tuples(st.sampled_from([b"accept", b"x-api-key", b"user-agent"]),
                           st.binary(max_size=20)), max_size=4)


@given(cookie=st.none() | TOKEN, berth=st.none() | TOKEN, bearer=st.none() | TOKEN,
       basic=st.booleans(), noise=NOISE, data=st.randoms())
def test_find_token_takes_the_first_of_cookie_berth_header_bearer(
        cookie: str | None, berth: str | None, bearer: str | None, basic: bool,
        noise: list[tuple[bytes, bytes]], data: Any) -> None:
    headers = list(noise)
    if cookie:
        headers.append((b"cookie", f"other=1; {COOKIE_NAME}={cookie}".encode()))
    if berth:
        headers.append((b"berth-authorization", f"Bearer {berth}".encode()))
    if basic:
        headers.append((b"authorization", b"Basic " + base64.b64encode(b"u:p")))
    elif bearer:
        headers.append((b"authorization", f"bearer  {bearer} ".encode()))
    data.shuffle(headers)  # header order must not matter, only the precedence
    token, from_authorization = find_token(headers)
    expected = cookie or berth or (None if basic else bearer)
    assert token == expected
    assert from_authorization == (expected is not None and not cookie and not berth)


@given(st.lists(st.tuples(st.binary(max_size=20), st.binary(max_size=60)), max_size=8))
def test_find_token_never_raises_on_arbitrary_headers(headers: list[tuple[bytes, bytes]]) -> None:
    token, _ = find_token([(k.lower(), v) for k, v in headers])
    assert token is None or isinstance(token, str)
