"""cli/common.client_settings: the API URL, token and CA file a command calls with — plain strings as
berth/client_config.py reads them, anything else as berth.settings.ClientConfig coerces or refuses it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from berth.settings import ClientConfig
from cli.common import client_settings


def write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: object) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    monkeypatch.setenv("BERTH_CONFIG", str(path))
    for name in ("BERTH_API_URL", "BERTH_TOKEN", "BERTH_TLS_CA"):
        monkeypatch.delenv(name, raising=False)


def as_loaded() -> tuple[str, str | None, str | None]:
    config = ClientConfig.load()
    return config.api_url, config.token, config.ca_file


@pytest.mark.parametrize("data", [
    {"api_url": "https://berth.example:8443", "token": "tok", "ca_file": "/etc/ca.pem"},
    {"api_url": "http://127.0.0.1:18232"},
    {"token": "only-a-token"},
    {"api_url": "http://x", "token": None, "note": "a key ClientConfig ignores"},
])
def test_what_a_command_calls_with_is_what_client_config_loads(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: dict[str, object]) -> None:
    write(tmp_path, monkeypatch, data)
    assert client_settings() == as_loaded()


def test_the_environment_wins_over_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, monkeypatch, {"api_url": "http://file", "token": "file-token"})
    monkeypatch.setenv("BERTH_API_URL", "http://env")
    monkeypatch.setenv("BERTH_TOKEN", "env-token")
    assert client_settings() == ("http://env", "env-token", None) == as_loaded()


def test_a_value_that_is_no_string_is_refused_as_client_config_refuses_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path, monkeypatch, {"api_url": "http://x", "token": 12345})
    with pytest.raises(ValidationError, match="token"):
        client_settings()
