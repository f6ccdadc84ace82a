"""The client side's trust (berth/tls_client.py): an https API gets the CA store (and the named CA); a plain-http
one a context that trusts nothing, so that loading the store is never paid for it (issue 33)."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from berth.errors import UserInputError
from berth.tls_client import url_context


def test_plain_http_gets_a_context_that_trusts_nothing(tmp_path: Path) -> None:
    context = url_context("http://127.0.0.1:18232", tmp_path / "missing.pem")  # the CA file is never read
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert context.cert_store_stats()["x509_ca"] == 0


def test_https_gets_the_store_and_the_named_ca(tmp_path: Path) -> None:
    assert url_context("HTTPS://api.example:443", None) is True
    with pytest.raises(UserInputError, match="Cannot use the CA file"):
        url_context("https://api.example", tmp_path / "missing.pem")
