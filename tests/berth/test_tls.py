"""The private CA: lifetimes, names, key modes, renewal near expiry, and a real TLS handshake that trusts
it (and one that does not, failing with the documents' "unable to get local issuer certificate")."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from berth import tls
from berth.errors import UserInputError


def _cert(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_private_ca_issues_server_certificate_for_loopback_and_extra_names(tmp_path: Path) -> None:
    files = tls.ensure_private_ca(tmp_path / "tls", ("berth.example", "10.1.2.3"))
    ca, server = _cert(files.ca), _cert(files.cert)
    assert ca.not_valid_after_utc - ca.not_valid_before_utc >= tls.CA_LIFETIME
    lifetime = server.not_valid_after_utc - server.not_valid_before_utc
    assert tls.SERVER_LIFETIME <= lifetime <= tls.SERVER_LIFETIME + datetime.timedelta(minutes=10)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) == {"localhost", "berth.example"}
    assert set(names.get_values_for_type(x509.IPAddress)) == {ipaddress.ip_address("127.0.0.1"),
                                                                ipaddress.ip_address("10.1.2.3")}
    # Served as leaf + issuing CA; the root (what clients trust) signed the issuing CA.
    issuing = x509.load_pem_x509_certificates(files.cert.read_bytes())[1]
    server.verify_directly_issued_by(issuing)
    issuing.verify_directly_issued_by(ca)
    for key in (files.key, tmp_path / "tls" / "ca-key.pem", tmp_path / "tls" / "issuing-ca-key.pem"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "tls").stat().st_mode) == 0o700


def test_server_certificate_kept_until_near_expiry_then_renewed(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    first = tls.ensure_private_ca(tmp_path)
    serial = _cert(first.cert).serial_number
    ca_serial = _cert(first.ca).serial_number
    assert _cert(tls.ensure_private_ca(tmp_path).cert).serial_number == serial
    # Within 30 days of its expiry (the renewal window made as wide as its whole life): a new one, same CA.
    monkeypatch.setattr(tls, "RENEW_WITHIN", tls.SERVER_LIFETIME + datetime.timedelta(days=1))
    renewed = tls.ensure_private_ca(tmp_path)
    assert _cert(renewed.cert).serial_number != serial
    assert _cert(renewed.ca).serial_number == ca_serial
    monkeypatch.undo()
    # Asking for another name issues a new certificate too.
    assert _cert(tls.ensure_private_ca(tmp_path, ("other.example",)).cert).serial_number != serial


def _serve_once(files: tls.TLSFiles) -> tuple[int, threading.Thread]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(files.cert, files.key)
    listener = socket.create_server(("127.0.0.1", 0))

    def accept() -> None:
        with listener:
            connection, _ = listener.accept()
            try:
                with context.wrap_socket(connection, server_side=True) as wrapped:
                    wrapped.sendall(b"ok")
            except (ssl.SSLError, OSError):
                connection.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    return listener.getsockname()[1], thread


def _handshake(port: int, context: ssl.SSLContext) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="127.0.0.1") as wrapped:
        return wrapped.recv(2)


def test_client_context_trusts_the_ca_and_the_system_store_alone_refuses(tmp_path: Path) -> None:
    files = tls.ensure_private_ca(tmp_path)
    port, thread = _serve_once(files)
    trusted = tls.client_context(files.ca)
    assert isinstance(trusted, ssl.SSLContext)
    assert _handshake(port, trusted) == b"ok"
    thread.join(10)
    port, thread = _serve_once(files)
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        _handshake(port, ssl.create_default_context())
    thread.join(10)


def test_unreadable_ca_file_and_partial_operator_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UserInputError, match="Cannot use the CA file"):
        tls.client_context(tmp_path / "missing.pem")
    assert tls.client_context(None) is True
    with pytest.raises(UserInputError, match="missing --tls-key, --tls-ca"):
        tls.operator_files(tmp_path / "cert.pem", None, None)
    assert tls.operator_files(None, None, None) is None
