"""`berth workflow list`'s fast path (cli/fast/, issue 33) answers as the Typer command does: for the same API
answer, the same stdout, stderr and exit code, for each output format and each way of writing the option, for
answers the fast path reads by hand and for those it leaves to the contract, for refusals and for an API that
cannot be reached. The fast path runs as a user runs it (`python -m cli`, a fresh interpreter); the Typer command
in this process (CliRunner), with the same client configuration."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli_start import CANNED_WORKFLOWS, PYTHON, REPO, client_env
from berth.processes import free_port
from cli import fast
from cli.app import app

pytestmark = pytest.mark.timeout(60)
TOKEN = "fast-path-token"


@dataclass
class Answer:
    """What the canned API answers to every request, and the requests it saw (path and headers that matter)."""

    status: int = 200
    content_type: str = "application/json"
    body: bytes = b"[]"
    seen: list[tuple[str, str | None]] = field(default_factory=list)


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Answer]]:
    answer = Answer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 — http.server's name
            answer.seen.append((self.path, self.headers.get("Authorization")))
            self.send_response(answer.status)
            self.send_header("Content-Type", answer.content_type)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="fast-path-api", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The client config's path (no file): beside it, the bytecode the fast path's runs share."""
    return tmp_path_factory.mktemp("fast-paths") / "client.json"


@pytest.fixture
def api(served: tuple[str, Answer]) -> tuple[str, Answer]:
    """The canned API, answering an empty listing until the test says otherwise."""
    url, answer = served
    answer.status, answer.content_type, answer.body = Answer().status, Answer().content_type, Answer().body
    answer.seen.clear()
    return url, answer


def both_paths(url: str, argv: list[str], config: Path,
               monkeypatch: pytest.MonkeyPatch) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit code, stdout, stderr) of `berth ARGV` by the fast path, then by the Typer command."""
    env = client_env(url, TOKEN, config)
    quick = subprocess.run([PYTHON, "-m", "cli", *argv], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=30)
    for name in [name for name in os.environ if name.startswith("BERTH_")]:
        monkeypatch.delenv(name)
    for name in ("BERTH_CONFIG", "BERTH_API_URL", "BERTH_TOKEN", "COLUMNS"):
        monkeypatch.setenv(name, env[name])
    typer = CliRunner().invoke(app, argv)
    return (quick.returncode, quick.stdout, quick.stderr), (typer.exit_code, typer.stdout, typer.stderr)


ROWS = [*CANNED_WORKFLOWS,
        {"id": "qwen-7b-2", "entry": "Qwen 7B", "owner": "bob", "created_at": 1764950460, "status": "completed",
         "phase": "stopped", "endpoint_id": "ep-2", "replicas": 3}]  # an int time, a field the contract ignores
FORMS = [["workflow", "list"], ["workflow", "list", "-o", "table"], ["workflow", "list", "--output", "json"],
         ["workflow", "list", "--output=json"], ["workflow", "list", "-ojson"]]


@pytest.mark.parametrize("argv", FORMS, ids=" ".join)
def test_every_form_prints_what_typer_prints(argv: list[str], api: tuple[str, Answer], config: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    url, answer = api
    answer.body = json.dumps(ROWS).encode()
    quick, typer = both_paths(url, argv, config, monkeypatch)
    assert quick == typer
    assert quick[0] == 0 and "qwen-7b-2" in quick[1] and quick[2] == ""
    assert answer.seen == [("/v1/workflows", f"Bearer {TOKEN}")] * 2


ANSWERS = {
    "no workflows": (200, "application/json", b"[]"),
    # Read by the contract (pydantic), not by hand: coerced, or refused in the contract's words.
    "a time as text": (200, "application/json", json.dumps([{**CANNED_WORKFLOWS[0], "created_at": "1764950400"}])),
    "a field missing": (200, "application/json", json.dumps([{"id": "x"}])),
    "not a list": (200, "application/json", b'{"workflows": []}'),
    "an empty answer": (200, "application/json", b""),
    "text": (200, "text/plain", b"hello"),
    # Cells Rich reads as markup or emoji: Rich draws the table, for both.
    "markup in a cell": (200, "application/json", json.dumps([{**CANNED_WORKFLOWS[0], "entry": "[bold]x[/] :+1:"}])),
    "401": (401, "application/json", b'{"detail": "Token expired. Sign in again with `berth login`."}'),
    "403": (403, "application/json", b'{"detail": "Only an admin may list every workflow.", "code": "forbidden"}'),
    "404": (404, "application/json", b'{"detail": "Not Found"}'),
    "500 as text": (500, "text/plain; charset=utf-8", "Internal Server Error ✗".encode()),
    "503": (503, "application/json", b'{"detail": "Temporal is unreachable."}'),
}


@pytest.mark.parametrize("output", ["table", "json"])
@pytest.mark.parametrize("case", ANSWERS)
def test_each_answer_and_refusal_ends_as_typer_ends_it(case: str, output: str, api: tuple[str, Answer],
                                                       config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url, answer = api
    status, content_type, body = ANSWERS[case]
    answer.status, answer.content_type = status, content_type
    answer.body = body if isinstance(body, bytes) else body.encode()
    quick, typer = both_paths(url, ["workflow", "list", "-o", output], config, monkeypatch)
    assert quick == typer
    assert (quick[0] == 0) == (status == 200 and case in ("no workflows", "a time as text", "markup in a cell"))


def test_an_unreachable_api_is_the_same_line(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    quick, typer = both_paths(url, ["workflow", "list"], config, monkeypatch)
    assert quick == typer
    assert quick[0] == 1 and quick[2].startswith(f"error: Cannot reach the Berth API at {url}.")


@pytest.mark.parametrize("argv", [
    ["workflow", "list", "--help"], ["workflow", "list", "-o", "yaml"], ["workflow", "list", "--bogus"],
    ["workflow", "list", "-o"], ["workflow", "list", "-o", "json", "-o", "table"], ["workflow", "list", "--", "x"],
    ["workflow", "list", "--output=JSON"], ["workflow", "describe", "x"], ["--help"], [],
])
def test_anything_else_goes_to_typer(argv: list[str]) -> None:
    assert fast.answer(argv) is None  # decided from the words alone: nothing imported, nothing asked


def test_a_setting_left_to_pydantic_or_httpx_goes_to_typer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.fast.api_get import target

    url = "http://127.0.0.1:1"
    assert target({"api_url": url, "token": "t", "ca_file": None}, {}) is not None
    assert target({"api_url": url, "token": 5, "ca_file": None}, {}) is None  # pydantic's to refuse
    assert target({"api_url": url, "token": "t"}, {"HTTP_PROXY": "http://proxy:3128"}) is None  # httpx's proxy
    assert target({"api_url": "https://api:8443"}, {"SSL_CERT_FILE": "/etc/ca.pem"}) is None
    assert target({"api_url": "https://api:8443"}, {"HTTP_PROXY": "http://proxy:3128"}) is not None
    assert target({"api_url": "ftp://api"}, {}) is None and target({"api_url": "http://a b"}, {}) is None
    config = tmp_path / "client.json"
    config.write_text("not json")
    monkeypatch.setenv("BERTH_CONFIG", str(config))
    assert fast.answer(["workflow", "list"]) is None  # the config file's error is Typer's to print
