"""Shared fixtures for the attack tests: the suite's shared simulated 2-node stack and five people in two
organizations, made with the real CLI. Each attack test reproduces an attack through the real API, endpoint
proxy and Temporal, and asserts that it now does no harm."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
import pytest

from tests.support import RunningStack

# name → (organization, groups). "admin" is the stack's administrator.
PEOPLE = {"admin": ("default", ("default",)), "bob": ("default", ("default",)),
          "carol": ("default", ("ops",)), "dave": ("acme", ("acme-eng",)), "erin": ("acme", ("acme-eng",))}


@dataclass
class People:
    """API tokens by person, and helpers that act as one of them."""

    stack: RunningStack
    tokens: dict[str, str]

    def env(self, person: str) -> dict[str, str]:
        return {**self.stack.env, "BERTH_TOKEN": self.tokens[person],
                "BERTH_API_URL": self.stack.info["api_url"]}

    def cli(self, person: str, *args: str, check: bool = False, input: str | None = None):  # type: ignore[no-untyped-def]
        return self.stack.cli(*args, env=self.env(person), check=check, input=input)

    def api(self, person: str, method: str, path: str, **kwargs: object) -> httpx.Response:
        return httpx.request(method, self.stack.info["api_url"] + path,
                             headers={"Authorization": f"Bearer {self.tokens[person]}"}, timeout=60,
                             **kwargs)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def security_stack(sim_stack: RunningStack) -> RunningStack:
    """The attack tests share the suite's simulated profile (tests/conftest.py): the same 2 nodes × 4×80 GB
    configuration they used to boot a second time. Their people are users of their own on it."""
    return sim_stack


@pytest.fixture(scope="session")
def people(security_stack: RunningStack) -> People:
    stack = security_stack
    stack.cli("group", "create", "ops")
    stack.cli("group", "create", "acme-eng", "--org", "acme")
    stack.cli("user", "create", "bob", "--group", "default")
    stack.cli("user", "create", "carol")
    stack.cli("group", "add-member", "ops", "carol")
    stack.cli("user", "create", "dave", "--org", "acme", "--group", "acme-eng")
    stack.cli("user", "create", "erin", "--org", "acme", "--group", "acme-eng")
    tokens = {"admin": stack.token}
    for name in ("bob", "carol", "dave", "erin"):
        tokens[name] = stack.cli("login", "--user", name, "--print-token").stdout.strip()
    return People(stack, tokens)
