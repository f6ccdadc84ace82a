"""`berth` answers at once (issue 33): `berth --help` imports no client, contract or settings module, `workflow
list` (its fast path, cli/fast/) none of Typer, Rich, pydantic, httpx or anything else heavy, and their CPU time
stays within a budget relative to a bare interpreter importing the libraries each command needs, measured in the
same run (bench/cli_start.py measures the same commands; docs/performance.md, "CLI start").

What a command imports is checked from `python -X importtime` (deterministic); the budgets compare CPU time
(user+system of the child, best of 3), which a loaded machine disturbs less than wall time.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest

from bench.cli_start import PYTHON, REPO, canned_api, client_env, measure

# Nothing that `berth --help` needs: the API client and the contracts' models, the settings (pydantic), the
# transport, certificates, Prometheus' parser, YAML, the catalog and the stack driver.
NOT_FOR_HELP = ("pydantic", "httpx", "anyio", "berth.api_client", "berth.api_transport", "berth.settings",
                "berth.contracts.base", "cryptography", "prometheus_client", "yaml", "jwt", "catalog", "stack",
                "temporalio")
# `workflow list`, answered by its fast path: the standard library's HTTP client and the client configuration,
# none of the libraries of the Typer path (nor what those bring: click, anyio, pygments) or of the server.
NOT_FOR_LIST = ("typer", "click", "rich", "pydantic", "pydantic_core", "httpx", "httpcore", "anyio", "asyncio",
                "sqlalchemy", "yaml", "jwt", "cryptography", "prometheus_client", "pygments", "temporalio",
                "berth.settings", "berth.api_transport", "berth.api_workflows", "berth.contracts", "cli.app",
                "cli.common", "catalog", "stack", "server")
# CPU time as a multiple of a bare interpreter's that imports the libraries the command needs: what Berth adds on
# top of them. Not of `python -c pass`'s: an interpreter's own start differs by machine (22-24 ms on one
# development machine, 11-12 ms on the next) far more than the libraries' imports do, and the same commands went
# from within the budget to over it with no change of Berth's. Measured on the 2-core development machine, loaded:
# `--help` 2.9×, `workflow list` 1.5× (of the standard library's HTTP client, TLS and JSON). The budgets leave
# room for a noisy CI machine; the import checks above catch a heavy import long before these do.
# Against `python -c pass` too, as issue 33 asks, with ceilings wide enough for the fastest interpreter start seen
# (`--help` 18× at 11 ms; `workflow list` 6× at 11 ms, 3× at 23 ms).
HELP_PASS_BUDGET = 25
LIST_PASS_BUDGET = 10
HELP_LIBRARIES = "import typer, rich.table"
LIST_LIBRARIES = "import http.client, ssl, json"
HELP_BUDGET = 4.0
LIST_BUDGET = 2.5


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The CLI's environment against a canned API on loopback (one valid `GET /v1/workflows` answer)."""
    with canned_api() as url:
        yield client_env(url, "test", tmp_path_factory.mktemp("cli-start") / "client.json")


def imported(env: dict[str, str], *argv: str) -> set[str]:
    """The modules `python -m cli ARGV` imports, from its `-X importtime` report."""
    result = subprocess.run([PYTHON, "-X", "importtime", "-m", "cli", *argv], env=env, cwd=REPO,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-2000:]
    return set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", result.stderr, re.MULTILINE))


def offenders(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == name or m.startswith(name + ".") for name in forbidden))


def test_help_imports_no_client_contract_or_settings(env: dict[str, str]) -> None:
    modules = imported(env, "--help")
    assert "typer" in modules and "cli.workflow" in modules  # the report was read
    assert not offenders(modules, NOT_FOR_HELP)


@pytest.mark.parametrize("output", ["table", "json"])
def test_workflow_list_imports_nothing_heavy(env: dict[str, str], output: str) -> None:
    modules = imported(env, "workflow", "list", "-o", output)
    assert {"cli.fast.api_get", "http.client"} <= modules  # the report was read, and the fast path answered
    assert not offenders(modules, NOT_FOR_LIST)


def test_help_and_workflow_list_cost_a_few_interpreter_starts(env: dict[str, str]) -> None:
    commands = {"pass": ["-c", "pass"], "help libraries": ["-c", HELP_LIBRARIES], "help": ["-m", "cli", "--help"],
                "list libraries": ["-c", LIST_LIBRARIES], "list": ["-m", "cli", "workflow", "list"]}
    for argv in commands.values():  # bytecode cached, as an installed CLI has it
        measure([PYTHON, *argv], env, 1)
    cpu = {name: measure([PYTHON, *argv], env, 3).cpu_s for name, argv in commands.items()}
    shown = {name: f"{seconds * 1000:.0f} ms" for name, seconds in cpu.items()}
    assert cpu["help"] <= HELP_BUDGET * cpu["help libraries"], shown
    assert cpu["list"] <= LIST_BUDGET * cpu["list libraries"], shown
    assert cpu["help"] <= HELP_PASS_BUDGET * cpu["pass"] and cpu["list"] <= LIST_PASS_BUDGET * cpu["pass"], shown


def test_the_canned_answer_is_a_valid_listing() -> None:
    from bench.cli_start import CANNED_WORKFLOWS
    from berth.contracts.workflows import WorkflowSummary

    assert [WorkflowSummary.model_validate(row).id for row in CANNED_WORKFLOWS] == ["gpt-oss-20b-1"]
