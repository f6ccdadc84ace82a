"""`berth model …` against a real API on loopback: add, list and describe as text and `-o json`, a
refused source in one line, materialize (recorded, then joined), `status --watch` following a job to Ready
and exiting 1 with the job's message when it fails, remove, and `cache evict` refused to a user."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from berth.contracts import ModelProgress, ModelProgressReport, ModelRecord, ModelState, ModelStateReport
from cli.app import app
from server.app import build_context
from server.context import ServerContext
from server.store.model_usage import ModelUsage
from tests.cli.loopback_api import serve_api

SMOL = "hf://HuggingFaceTB/SmolLM2-135M-Instruct"


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ServerContext]:
    context = build_context(tmp_path / "state", "127.0.0.1:1")  # the model routes never reach Temporal
    alice = context.store.ensure_user("alice", org="default", groups=["default"])

    async def start(_context: ServerContext, _record: ModelRecord, _kind: str, _job_id: str,
                    _waiter: str | None = None) -> None:
        return None

    context.model_jobs = start
    with serve_api(context, context.signing.api_token(alice), tmp_path, monkeypatch):
        yield context


def _run(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_add_list_describe_and_remove(served: ServerContext) -> None:
    code, out = _run("model", "add", "smol", "--source", SMOL, "--license", "apache-2.0")
    assert code == 0 and "Registered model smol" in out, out
    code, out = _run("model", "add", "bad", "--source", "hf://nope")
    assert code == 1 and "org/name" in out and "Traceback" not in out
    code, out = _run("model", "list")
    assert code == 0 and "smol" in out and "Registered" in out
    code, out = _run("model", "list", "-o", "json")
    assert code == 0 and [m["name"] for m in json.loads(out)] == ["smol"]
    code, out = _run("model", "describe", "smol")
    assert code == 0 and "apache-2.0" in out and "HuggingFaceTB/SmolLM2-135M-Instruct" in out
    code, out = _run("model", "remove", "smol")
    assert code == 0 and "Removed model smol" in out
    assert json.loads(_run("model", "list", "-o", "json")[1]) == []


def _finish_job(context: ServerContext, name: str, state: ModelState, message: str | None = None) -> None:
    """Play the model job: a progress report, then its end."""
    usage = ModelUsage(context.store)
    model = usage.registry.find(context.store.identity("alice"), name)
    assert model.job_id is not None
    usage.apply_progress(model.id, ModelProgressReport(job_id=model.job_id, progress=ModelProgress(
        bytes_done=5, bytes_total=10, rate_bps=1e6, eta_s=5)))
    usage.apply_state(model.id, ModelStateReport.model_validate(
        {"job_id": model.job_id, "state": state, "message": message, "digest": "ab" * 32}))


def test_materialize_then_watch_to_ready_or_failure(served: ServerContext) -> None:
    _run("model", "add", "smol", "--source", SMOL)
    code, out = _run("model", "materialize", "smol", "-o", "json")
    assert code == 0 and json.loads(out)["joined"] is False, out
    code, out = _run("model", "materialize", "smol")
    assert code == 0 and "Joined the running materialize job" in out
    job = threading.Thread(target=_finish_job, args=(served, "smol", ModelState.READY))
    job.start()
    code, out = _run("model", "status", "smol", "--watch")
    job.join(timeout=10)
    assert code == 0 and "Ready." in out and "ab" * 32 in out, out
    _run("model", "add", "broken", "--source", SMOL)
    _run("model", "materialize", "broken")
    _finish_job(served, "broken", ModelState.FAILED, "Scanning refused model.pt (a pickle)")
    code, out = _run("model", "status", "broken", "--watch")
    assert code == 1 and "Scanning refused model.pt" in out
    code, out = _run("model", "jobs", "-o", "json")
    assert code == 0 and {j["model"] for j in json.loads(out)} == {"smol", "broken"}


def test_cache_evict_is_for_administrators(served: ServerContext) -> None:
    code, out = _run("model", "cache", "evict", "--budget-bytes", "0")
    assert code == 1 and "administrators" in out
