"""`berth admin backup > file` and `berth admin restore file` against real APIs on loopback: a control plane with a
user, a secret and an API key backed up, restored into a fresh one holding the same keys; a file of another version
and a restore over a store in use are refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from berth.security import Identity
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from tests.cli.loopback_api import serve_api

pytestmark = pytest.mark.timeout(60)
ADMIN = Identity(user="admin", groups=("default",), org="default", admin=True)


class NoStarts:
    """Temporal, never reached: these control planes hold no workflow to start."""

    async def start_workflow(self, *_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("no workflow to start")


def _context(state_dir: Path) -> ServerContext:
    context = build_context(state_dir, "127.0.0.1:1")
    context._temporal = NoStarts()  # type: ignore[assignment]
    return context


def _run(*argv: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_backup_then_restore_into_a_fresh_control_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _context(tmp_path / "old")
    old.store.create_user("alice", "acme", ["team"])
    with serve_api(old, old.signing.api_token(ADMIN), tmp_path, monkeypatch):
        assert _run("secret", "create", "secret://user/token", "plain-text-value")[0] == 0
        code, document, summary = _run("admin", "backup")
    assert code == 0, summary
    assert json.loads(document)["tables"]["users"][1]["name"] == "alice"
    assert "plain-text-value" not in document
    assert summary.startswith("Backed up 2 users, 2 groups, 2 memberships, 0 workflows")
    backup = tmp_path / "backup.json"
    backup.write_text(document)

    shutil.copytree(old.state.keys, tmp_path / "new" / old.state.keys.name)
    new = _context(tmp_path / "new")
    with serve_api(new, new.signing.api_token(ADMIN), tmp_path, monkeypatch):
        code, out, err = _run("admin", "restore", str(backup))
        assert code == 0, err
        assert out.startswith("Restored 2 users, 2 groups, 2 memberships, 0 workflows, 0 workflow revisions, "
                              "0 endpoints, 1 secrets")
        code, out, err = _run("admin", "restore", str(backup))  # now the store holds a secret
    assert code == 1 and "already holds secrets" in err and len(err.strip().splitlines()) == 1
    assert [user.user for user in new.store.users()] == ["admin", "alice"]


def test_a_file_of_another_version_is_refused_before_any_call(tmp_path: Path) -> None:
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({"format": "berth-backup", "version": 2, "tables": {}}))
    code, _out, err = _run("admin", "restore", str(newer))
    assert code == 1 and f"{newer} is not a backup this Berth restores" in err
    assert "backup version 2 unknown; this Berth reads 1" in err
    (tmp_path / "not.json").write_text("{")
    code, _out, err = _run("admin", "restore", str(tmp_path / "not.json"))
    assert code == 1 and "not JSON" in err
