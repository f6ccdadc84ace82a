"""berth.contracts imports its modules when first needed (issue 33): one module imported alone pays for itself,
and every name the package lists still reads from it, as the object its module defines."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import berth.contracts

PACKAGE = Path(berth.contracts.__file__)


def test_one_module_imports_no_other_contracts() -> None:
    code = ("import sys; import berth.contracts.workflows; "
            "print(sorted(m for m in sys.modules if m.startswith('berth.contracts')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                            cwd=PACKAGE.parents[2])
    assert result.stdout.strip() == str(["berth.contracts", "berth.contracts.base", "berth.contracts.choices",
                                         "berth.contracts.rollouts", "berth.contracts.workflows"])


def test_every_listed_name_is_its_modules_object() -> None:
    homes = {alias.asname or alias.name: node.module for node in ast.walk(ast.parse(PACKAGE.read_text()))
             if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("berth.contracts.")
             for alias in node.names}
    assert sorted(homes) == sorted(berth.contracts.__all__)  # the type checker's imports list every name
    for name, module in homes.items():
        assert getattr(berth.contracts, name) is getattr(importlib.import_module(module), name), name


def test_a_module_reads_as_an_attribute_and_a_typo_is_an_attribute_error() -> None:
    assert berth.contracts.model_registry is importlib.import_module("berth.contracts.model_registry")
    try:
        berth.contracts.WorkflowSumary  # noqa: B018
    except AttributeError as error:
        assert "WorkflowSumary" in str(error)
    else:
        raise AssertionError("a misspelt contract read as something")


def test_the_api_client_imports_a_contract_when_a_method_first_names_it() -> None:
    """Every CLI command that calls the API imports berth.api_client; it imported every contract's module and PyJWT
    (with cryptography) at once, ~0.2 s of CPU a command. Now only what its methods' signatures name at definition
    time loads, and a method's answer loads its own module when it is first read."""
    code = ("import sys, asyncio, httpx; import berth.api_client as c; "
            "print(sorted(m for m in sys.modules if m.startswith('berth.contracts.') or m in "
            "('jwt', 'cryptography', 'berth.settings', 'berth.tokens'))); "
            "t = httpx.MockTransport(lambda r: httpx.Response(200, json=[])); "
            "print(asyncio.run(c.ApiClient('http://api', 't', transport=t).endpoints()), "
            "'berth.contracts.endpoints' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60,
                            cwd=PACKAGE.parents[2])
    loaded, answered = result.stdout.strip().splitlines()
    named_at_definition = {"berth.contracts.base", "berth.contracts.choices", "berth.contracts.endpoint_history",
                           "berth.contracts.mig", "berth.contracts.usage", "berth.tokens"}
    assert set(ast.literal_eval(loaded)) <= named_at_definition, loaded
    assert answered == "[] True"
