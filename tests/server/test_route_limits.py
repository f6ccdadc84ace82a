"""The routes table sends an endpoint's `limits` annotation (its override of the cluster's limits) as the
fields it sets, only when there is one; an invalid one is logged and left out."""

from __future__ import annotations

import pytest

from server.routes.internal import _limits


def test_the_routes_table_carries_an_endpoint_override(caplog: pytest.LogCaptureFixture) -> None:
    assert _limits("ep1", {}) == {}
    sent = _limits("ep1", {"limits": {"user": {"requests_per_minute": 5}, "max_tokens": None}})
    assert sent == {"limits": {"user": {"requests_per_minute": 5}, "max_tokens": None}}  # the null: off
    with caplog.at_level("WARNING"):
        assert _limits("ep1", {"limits": {"max_tokens": "lots"}}) == {}
    assert "endpoint ep1: the endpoint's `limits` annotation: max_tokens" in caplog.text
