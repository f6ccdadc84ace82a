"""Issue 11, item 9: a shared (organization or group) secret is changed or deleted only by its creator or
an administrator. Another member is refused in one line, and the value every workflow of the
organization (or group) resolves stays the creator's."""

from __future__ import annotations

import sqlite3
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from berth.errors import PermissionDeniedError
from berth.security import Cipher, Identity
from server.store.database import Store
from server.store.secrets import Secrets
from tests.security.conftest import People


def _resolved(people: People, ref: str, user: str) -> str:
    """The value a workflow of `user` gets for `ref` (what the control worker resolves)."""
    response = people.api("admin", "POST", "/v1/internal/secrets/resolve", json={"ref": ref, "user": user})
    assert response.status_code == 200, response.text
    return str(response.json()["value"])


def _refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return str(lines[0])


def test_an_organization_secret_is_changed_only_by_its_creator_or_an_administrator(people: People) -> None:
    ref = f"secret://organization/shared-{uuid.uuid4().hex[:6]}"
    assert people.cli("bob", "secret", "create", ref, input="bobs-value").returncode == 0
    # carol, in bob's organization, cannot swap the value under everyone's workflows...
    line = _refused(people.cli("carol", "secret", "create", ref, input="carols-value"))
    assert "bob" in line and "administrator" in line
    direct = people.api("carol", "POST", "/v1/secrets", json={"ref": ref, "type": "value", "value": "x"})
    assert direct.status_code == 403
    assert _resolved(people, ref, "carol") == "bobs-value"
    # ...nor delete it; she still sees it, and who made it.
    _refused(people.cli("carol", "secret", "delete", ref))
    listed = {r["ref"]: r for r in people.stack.cli_json("secret", "list")}
    assert listed[ref]["created_by"] == "bob"
    # Its creator may, and so may an administrator (who does not become its creator).
    assert people.cli("bob", "secret", "create", ref, input="bobs-second").returncode == 0
    assert _resolved(people, ref, "carol") == "bobs-second"
    assert people.cli("admin", "secret", "create", ref, input="admins-value").returncode == 0
    assert _resolved(people, ref, "bob") == "admins-value"
    assert {r["ref"]: r for r in people.stack.cli_json("secret", "list")}[ref]["created_by"] == "bob"
    assert people.cli("admin", "secret", "delete", ref).returncode == 0
    assert ref not in people.cli("bob", "secret", "list").stdout


def test_a_group_secret_is_changed_only_by_its_creator(people: People) -> None:
    ref = f"secret://group/team-{uuid.uuid4().hex[:6]}"
    assert people.cli("dave", "secret", "create", ref, input="daves-value").returncode == 0
    assert "dave" in _refused(people.cli("erin", "secret", "create", ref, input="erins-value"))
    _refused(people.cli("erin", "secret", "delete", ref))
    assert _resolved(people, ref, "erin") == "daves-value"
    assert people.cli("dave", "secret", "delete", ref).returncode == 0


OLD_SECRETS_TABLE = """CREATE TABLE secrets (ref VARCHAR(300) NOT NULL PRIMARY KEY, scope VARCHAR(32) NOT NULL,
    owner VARCHAR(128) NOT NULL, name VARCHAR(128) NOT NULL, type VARCHAR(32) NOT NULL,
    ciphertext TEXT NOT NULL, created_at FLOAT NOT NULL)"""


def test_a_secret_from_before_creators_were_recorded_is_an_administrators(tmp_path: Path) -> None:
    """The schema change is additive: an existing database gains the column, and its rows (no creator
    known) may be changed by an administrator only."""
    cipher = Cipher.load_or_create(tmp_path / "keys")
    database = tmp_path / "berth.db"
    with sqlite3.connect(database) as connection:
        connection.execute(OLD_SECRETS_TABLE)
        connection.execute("INSERT INTO secrets VALUES (?, ?, ?, ?, ?, ?, ?)",
                           ("organization/default/old", "organization", "default", "old", "value",
                            cipher.encrypt_json({"value": "v1"}), time.time()))
    secrets = Secrets(Store(f"sqlite:///{database}", cipher))
    bob = Identity(user="bob", groups=("default",), org="default")
    with pytest.raises(PermissionDeniedError, match="no recorded creator"):
        secrets.create(bob, "secret://organization/old", "value", "v2")
    with pytest.raises(PermissionDeniedError):
        secrets.delete(bob, "secret://organization/old")
    admin = Identity(user="admin", groups=("default",), org="default", admin=True)
    secrets.create(admin, "secret://organization/old", "value", "v3")
    assert secrets.resolve(bob, "secret://organization/old") == ("value", "v3")
    secrets.delete(admin, "secret://organization/old")
