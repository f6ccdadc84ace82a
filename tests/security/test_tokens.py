"""Issue 11, item 7: API tokens have a capped lifetime, carry an id the registry lists, can be revoked (one
by id, or every token of a user, listed or not) and are refused at once; `berth up` rotates its
administrator token and revokes the one it wrote before."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from berth.errors import AuthenticationError
from berth.security import API_AUDIENCE, Cipher, Identity, SigningKey, TokenVerifier
from server.store.database import Store
from server.store.token_registry import TokenRegistry
from tests.security.conftest import People
from tests.support import RunningStack, free_port_base


def _mint(people: People, minter: str, user: str, expiration: str, note: str = "") -> httpx.Response:
    return people.api(minter, "POST", f"/v1/users/{user}/tokens", json={"expiration": expiration, "note": note})


def _as(people: People, token: str, *args: str) -> Any:
    env = {**people.stack.env, "BERTH_TOKEN": token, "BERTH_API_URL": people.stack.info["api_url"]}
    return people.stack.cli(*args, env=env, check=False)


def _whoami(api_url: str, token: str) -> httpx.Response:
    return httpx.get(api_url + "/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and len(lines[0]) < 300, text[:2000]
    return lines[0]


@pytest.fixture
def frank(people: People) -> str:
    """A user of one test only: revoking his tokens touches no other test's people."""
    name = f"frank-{uuid.uuid4().hex[:6]}"
    people.stack.cli("user", "create", name, "--org", "acme", "--group", "acme-eng")
    return name


@pytest.mark.parametrize("expiration", ["36500d", "5218w", "876000h", "9.9e22w", "100y", "9" * 40 + "w"])
def test_absurd_lifetimes_are_refused(people: People, frank: str, expiration: str) -> None:
    response = _mint(people, "admin", frank, expiration)
    assert response.status_code == 400, response.text
    _one_line(response.json()["detail"])
    result = people.cli("admin", "login", "--user", frank, "--expiration", expiration, "--print-token")
    assert result.returncode != 0 and result.stdout == ""
    assert "expiration" in _one_line(result.stderr).lower()


def test_the_cap_is_the_clusters_and_binds_users_and_administrators(people: People, frank: str) -> None:
    assert _mint(people, "admin", frank, "90d").status_code == 201
    refused = _mint(people, "admin", frank, "91d")
    assert refused.status_code == 400 and "90d" in refused.json()["detail"]
    assert _mint(people, "erin", "erin", "2200h").status_code == 400  # a user minting their own: capped too
    assert _mint(people, "erin", "erin", "0h").status_code == 400


def test_a_revoked_token_is_refused_at_once(people: People, frank: str) -> None:
    minted = _mint(people, "admin", frank, "1h", "laptop").json()
    token, token_id = minted["token"], minted["id"]
    api_url = people.stack.info["api_url"]
    assert _whoami(api_url, token).status_code == 200
    listed = _as(people, token, "token", "list", "-o", "json")
    assert listed.returncode == 0 and token not in listed.stdout  # ids, never the tokens
    assert "laptop" in listed.stdout and token_id in listed.stdout
    # Another user neither sees nor revokes it.
    assert people.api("bob", "GET", f"/v1/tokens?user={frank}").status_code == 403
    assert token_id not in people.api("bob", "GET", "/v1/tokens").text
    assert people.api("bob", "DELETE", f"/v1/tokens/{token_id}").status_code == 404
    assert _whoami(api_url, token).status_code == 200

    revoked = _as(people, token, "token", "revoke", token_id)
    assert revoked.returncode == 0, revoked.stderr
    refused = _whoami(api_url, token)
    assert refused.status_code == 401 and refused.json()["detail"].startswith("Token revoked")
    cli = _as(people, token, "workflow", "list")
    assert cli.returncode != 0 and "revoked" in _one_line(cli.stderr)
    row = next(r for r in people.stack.cli_json("token", "list", "--user", frank) if r["id"] == token_id)
    assert row["state"] == "revoked" and row["revoked_by"] == frank


def test_revoke_all_refuses_every_token_of_the_user_listed_or_not(people: People, frank: str) -> None:
    api_url = people.stack.info["api_url"]
    minted = [_mint(people, "admin", frank, "1h").json()["token"] for _ in range(2)]
    # One never issued through the API (straight from the signing key, as `berth admin-token` does).
    key = SigningKey.load_or_create(people.stack.state_dir / "keys")
    unlisted = key.api_token(Identity(user=frank, groups=("acme-eng",), org="acme"), 3600)
    tokens = [*minted, unlisted]
    assert all(_whoami(api_url, t).status_code == 200 for t in tokens)
    assert people.api("dave", "POST", f"/v1/users/{frank}/tokens/revoke-all").status_code == 403
    assert all(_whoami(api_url, t).status_code == 200 for t in tokens)

    result = people.cli("admin", "token", "revoke", "--all", "--user", frank)
    assert result.returncode == 0, result.stderr
    assert [_whoami(api_url, t).status_code for t in tokens] == [401, 401, 401]
    fresh = _mint(people, "admin", frank, "1h").json()["token"]  # a new one works again
    assert _whoami(api_url, fresh).status_code == 200


@pytest.fixture
def own_stack(tmp_path: Path) -> Iterator[RunningStack]:
    """A small stack of this test's own: it is stopped and started again (`berth up` twice)."""
    stack = RunningStack(state_dir=tmp_path / "state", port_base=free_port_base(), nodes=1, simulate_gpus="1x80GB")
    try:
        yield stack.start()
    finally:
        stack.stop()


def test_berth_up_rotates_the_administrator_token(own_stack: RunningStack) -> None:
    first = own_stack.token
    assert _whoami(own_stack.info["api_url"], first).status_code == 200
    own_stack.stop()
    own_stack.start()
    second = own_stack.token
    assert second != first
    refused = _whoami(own_stack.info["api_url"], first)
    assert refused.status_code == 401 and refused.json()["detail"].startswith("Token revoked")
    assert _whoami(own_stack.info["api_url"], second).status_code == 200
    rows = {r["note"] + ":" + r["state"] for r in own_stack.cli_json("token", "list", "--user", "admin")
            if r["kind"] == "stack"}
    assert rows == {"berth up:revoked", "berth up:active"}


async def test_another_api_process_refuses_a_revoked_token_within_its_refresh(tmp_path: Path) -> None:
    """Several API processes (one database): the one that revokes refuses at once, the others within
    `token_revocation_refresh_s`."""
    keys = tmp_path / "keys"
    store = Store(f"sqlite:///{tmp_path / 'berth.db'}", Cipher.load_or_create(keys))
    key = SigningKey.load_or_create(keys)
    claims = TokenVerifier.from_jwks(key.jwks()).verify(key.api_token(Identity("frank", (), "acme"), 3600),
                                                        API_AUDIENCE)
    here, there = TokenRegistry(store, 0.2), TokenRegistry(store, 0.2)
    await there.admit(claims)  # seen first there: recorded
    here.revoke(Identity("admin", admin=True), str(claims["jti"]))
    with pytest.raises(AuthenticationError, match="Token revoked"):
        await here.admit(claims)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            await there.admit(claims)
        except AuthenticationError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the other process still admits the revoked token after 5 s")
