"""`berth workflow list`'s fast path (cli/fast/, issue 33) answers as the Typer command does: for the same API
answer, the same stdout, stderr and exit code, for each output format and each way of writing the option, for
answers the fast path reads by hand and for those it leaves to the contract, for refusals and for an API that
cannot be reached. The fast path runs as a user runs it (`python -m cli`, a fresh interpreter); the Typer command
in this process (CliRunner), with the same client configuration."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli_start import CANNED_WORKFLOWS, PYTHON, REPO, client_env
from berth.processes import free_port
from berth.tls import TLSFiles, ensure_private_ca
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


@contextmanager
def serve(answer: Answer, tls: TLSFiles | None = None) -> Iterator[str]:
    """An API on loopback that gives `answer` to every GET (over https with `tls`): its URL."""

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
    if tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(tls.cert, tls.key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="fast-path-api", daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, Answer]]:
    answer = Answer()
    with serve(answer) as url:
        yield url, answer


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


def both_paths(url: str, argv: list[str], config: Path, monkeypatch: pytest.MonkeyPatch,
               changes: Mapping[str, str | None] | None = None) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(exit code, stdout, stderr) of `berth ARGV` by the fast path, then by the Typer command; `changes`: variables
    set (or, None, unset) for both."""
    env = client_env(url, TOKEN, config)
    for name, value in (changes or {}).items():
        env.pop(name, None)
        if value is not None:
            env[name] = value
    quick = subprocess.run([PYTHON, "-m", "cli", *argv], env=env, cwd=REPO, capture_output=True, text=True,
                           timeout=30)
    for name in [name for name in os.environ if name.startswith("BERTH_")]:
        monkeypatch.delenv(name)
    for name in ("BERTH_CONFIG", "BERTH_API_URL", "BERTH_TOKEN", "COLUMNS", *(changes or {})):
        if name in env:
            monkeypatch.setenv(name, env[name])
        else:
            monkeypatch.delenv(name, raising=False)
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


def test_the_config_file_is_read_alike(api: tuple[str, Answer], config: Path, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    url, answer = api
    answer.body = json.dumps(ROWS).encode()
    file = tmp_path / "config.json"
    file.write_text(json.dumps({"api_url": url + "/", "token": "from-the-file", "unknown": 1}))
    changes = {"BERTH_CONFIG": str(file), "BERTH_API_URL": None, "BERTH_TOKEN": None}
    quick, typer = both_paths(url, ["workflow", "list", "-o", "json"], config, monkeypatch, changes)
    assert quick == typer and quick[0] == 0
    assert answer.seen == [("/v1/workflows", "Bearer from-the-file")] * 2


def test_an_unreachable_api_is_the_same_line(config: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    quick, typer = both_paths(url, ["workflow", "list"], config, monkeypatch)
    assert quick == typer
    assert quick[0] == 1 and quick[2].startswith(f"error: Cannot reach the Berth API at {url}.")


@pytest.fixture(scope="module")
def tls_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Answer, TLSFiles]]:
    """The canned API over https, its certificate from a private CA (as `berth up --tls` serves it)."""
    answer = Answer(body=json.dumps(ROWS).encode())
    files = ensure_private_ca(tmp_path_factory.mktemp("tls"))
    with serve(answer, files) as url:
        yield url, answer, files


# httpx's own CA store settings, which the fast path leaves to httpx: unset, so that both paths trust the same.
NO_CA_STORE: dict[str, str | None] = {"SSL_CERT_FILE": None, "SSL_CERT_DIR": None}


@pytest.mark.parametrize("trust", ["the cluster CA", "nothing of the cluster's", "a CA file that is not there"])
def test_an_https_api_is_trusted_or_refused_alike(trust: str, tls_api: tuple[str, Answer, TLSFiles], config: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    url, answer, files = tls_api
    ca = {"the cluster CA": str(files.ca), "nothing of the cluster's": None,
          "a CA file that is not there": str(files.ca.with_name("missing.pem"))}[trust]
    changes = {**NO_CA_STORE, "BERTH_TLS_CA": ca}
    from cli.fast.api_get import target

    assert target({"api_url": url}, {name: value for name, value in changes.items() if value}) is not None
    quick, typer = both_paths(url, ["workflow", "list"], config, monkeypatch, changes)
    assert quick == typer
    assert (quick[0] == 0) == (trust == "the cluster CA"), quick
    if trust == "nothing of the cluster's":
        assert "certificate at" in quick[2] and "is not trusted (unable to get local issuer certificate)" in quick[2]


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
