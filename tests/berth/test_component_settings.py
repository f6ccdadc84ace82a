"""berth/settings/'s component accessors: what `berth up` sets for each component process."""

from __future__ import annotations

from pathlib import Path

import pytest

from berth import settings
from berth.errors import UserInputError


def test_required_variables_refuse_in_one_line_when_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BERTH_STATE_DIR", "BERTH_API_URL", "BERTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for read, name in ((settings.component_state_dir, "BERTH_STATE_DIR"),
                       (settings.component_api_url, "BERTH_API_URL"), (settings.component_token, "BERTH_TOKEN")):
        with pytest.raises(UserInputError, match=f"^{name} is not set. `berth up` sets it"):
            read()


def test_values_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("BERTH_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("BERTH_API_URL", "http://127.0.0.1:1")
    monkeypatch.setenv("BERTH_TOKEN", "t")
    monkeypatch.setenv("BERTH_TEMPORAL_ADDRESS", "temporal:7233")
    monkeypatch.setenv("BERTH_DATABASE_URL", "sqlite:///x.db")
    monkeypatch.setenv("BERTH_GATEWAY_MASTER_KEY", "")
    monkeypatch.setenv("BERTH_REPLICA_KEYS_TOKEN", "r")
    assert (settings.component_state_dir(), settings.component_api_url(), settings.component_token(),
            settings.temporal_address(), settings.database_url(), settings.gateway_master_key(),
            settings.replica_keys_token()) == (tmp_path, "http://127.0.0.1:1", "t", "temporal:7233",
                                               "sqlite:///x.db", None, "r")


def test_optional_variables_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("BERTH_TEMPORAL_ADDRESS", "BERTH_DATABASE_URL", "BERTH_GATEWAY_MASTER_KEY",
                 "BERTH_REPLICA_KEYS_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    assert settings.temporal_address() == "127.0.0.1:7233"
    assert (settings.database_url(), settings.gateway_master_key(), settings.replica_keys_token()) == (None,) * 3


def test_the_limits_come_from_the_environment() -> None:
    assert settings.ProxyLimits.from_env({}) == settings.ProxyLimits(1024 * 1024, 600.0, 60.0)
    assert settings.ProxyLimits.from_env({"BERTH_UPSTREAM_DEADLINE_S": "30", "BERTH_STREAM_IDLE_S": "5"},
                                         body_limit_bytes=2048) == settings.ProxyLimits(2048, 30.0, 5.0)
    for bad in ({"BERTH_UPSTREAM_DEADLINE_S": "2m"}, {"BERTH_STREAM_IDLE_S": "0"}):
        with pytest.raises(UserInputError):
            settings.ProxyLimits.from_env(bad)


def test_weights_come_from_hf_endpoint_then_the_clusters_mirror_then_the_hub(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Both download paths (a catalog start's weights, a model job) ask this one method: the weights path once
    # read only HF_ENDPOINT and went to the Hub on a cluster whose mirror was set in cluster.json.
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert settings.ClusterSettings().weights_endpoint() == settings.HF_HUB_ENDPOINT
    mirrored = settings.ClusterSettings(hf_endpoint="http://mirror.internal:8090")
    assert mirrored.weights_endpoint() == "http://mirror.internal:8090"
    monkeypatch.setenv("HF_ENDPOINT", "http://node-local:8090")
    assert mirrored.weights_endpoint() == "http://node-local:8090"


def test_temporal_dynamic_config_is_key_value_pairs_for_the_dev_servers_argv() -> None:
    assert settings.temporal_dynamic_config({}) == []
    pairs = "limit.historyCount.suggestContinueAsNew=400  system.enableEagerWorkflowStart=true"
    assert settings.temporal_dynamic_config({"BERTH_TEMPORAL_DYNAMIC_CONFIG": pairs}) == pairs.split()
    # Each pair is one argument of the server's command line: no option, no quoting, no shell word gets through.
    for bad in ("limit", "=3", "--log-level=debug", "a.b=$(id)", 'a.b="x"', "a..b=1", "a.b=1e9"):
        with pytest.raises(UserInputError, match="^BERTH_TEMPORAL_DYNAMIC_CONFIG: .* is not KEY=VALUE"):
            settings.temporal_dynamic_config({"BERTH_TEMPORAL_DYNAMIC_CONFIG": bad})
