"""A generated OpenCode password is usable on the command line the show-server log prints."""

from __future__ import annotations

import pytest

from berth import opencode


def test_a_generated_password_never_reads_as_an_option(monkeypatch: pytest.MonkeyPatch) -> None:
    drawn = iter(["-starts-like-a-flag", "_fine-password"])
    monkeypatch.setattr(opencode.secrets, "token_urlsafe", lambda _n: next(drawn))
    assert opencode.generate_password() == "_fine-password"


def test_generated_passwords_are_long_and_distinct() -> None:
    passwords = {opencode.generate_password() for _ in range(200)}
    assert len(passwords) == 200 and not any(p.startswith("-") or len(p) < 32 for p in passwords)
