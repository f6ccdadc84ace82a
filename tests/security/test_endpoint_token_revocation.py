"""Issue 31, item 10, through the whole stack: a leaked endpoint token is ended by id. Its holder lists the
endpoint's tokens (ids, never tokens), revokes one with the CLI, and the real endpoint proxy refuses it
within a couple of seconds while the holder's other token still works; someone outside the endpoint's scope
can neither list nor revoke them."""

from __future__ import annotations

import json
import time

import httpx

from tests.security.conftest import People
from tests.support import wait_for

MODEL = "GPT-OSS 20B"
REFUSED_WITHIN_S = 5.0  # the proxy refreshes its routes table each second; room for a loaded CI machine


def _minted(people: People, person: str, endpoint_id: str) -> tuple[str, str]:
    """(token, id) as `berth endpoint generate-token` gives them: the token on stdout, its id on stderr."""
    result = people.cli(person, "endpoint", "generate-token", endpoint_id, "--expiration", "1h", check=True)
    token = result.stdout.strip()
    assert result.stdout == token + "\n"
    return token, result.stderr.split("Token id ", 1)[1].split()[0]


def test_a_revoked_endpoint_token_is_refused_by_the_proxy(people: People) -> None:
    started = people.cli("bob", "workflow", "catalog", "start", MODEL, "--values", "Proxy=false,Scope=group",
                         check=True)
    workflow_id = started.stdout.strip().splitlines()[0]
    try:
        wait_for(lambda: people.api("bob", "GET", f"/v1/workflows/{workflow_id}").json().get("phase") == "ready",
                 240, f"{workflow_id} ready")
        endpoint = people.api("bob", "GET", f"/v1/workflows/{workflow_id}").json()["endpoint"]
        endpoint_id, models_url = endpoint["id"], endpoint["url"] + "/v1/models"
        (leaked, leaked_id), (kept, kept_id) = _minted(people, "bob", endpoint_id), _minted(people, "bob", endpoint_id)
        for token in (leaked, kept):
            assert httpx.get(models_url, headers={"Authorization": f"Bearer {token}"}, timeout=30).status_code == 200

        listed = people.cli("bob", "endpoint", "tokens", endpoint_id, "-o", "json", check=True).stdout
        assert {leaked_id, kept_id} <= {record["id"] for record in json.loads(listed)}
        assert leaked not in listed and kept not in listed
        outsider = people.cli("carol", "endpoint", "revoke-token", endpoint_id, leaked_id)
        assert outsider.returncode == 1 and "outside endpoint" in outsider.stderr

        revoked = people.cli("bob", "endpoint", "revoke-token", endpoint_id, leaked_id, check=True)
        assert f"Revoked token {leaked_id}" in revoked.stdout
        revoked_at = time.monotonic()

        def refused() -> httpx.Response | None:
            answer = httpx.get(models_url, headers={"Authorization": f"Bearer {leaked}"}, timeout=30)
            return answer if answer.status_code != 200 else None
        answer = wait_for(refused, REFUSED_WITHIN_S, "the revoked token refused")
        assert time.monotonic() - revoked_at < REFUSED_WITHIN_S
        assert (answer.status_code, answer.text) == (401, "Unauthorized")
        assert httpx.get(models_url, headers={"Authorization": f"Bearer {kept}"}, timeout=30).status_code == 200
    finally:
        people.cli("admin", "workflow", "stop", workflow_id)
