"""The embedded stack's private CA and server certificate (`berth up --tls`). The client side's trust is
berth/tls_client.py (re-exported here): a client never imports `cryptography`."""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from berth.errors import UserInputError
from berth.tls_client import client_context as client_context  # re-exported: berth.tls names it too

CA_LIFETIME = datetime.timedelta(days=3650)
SERVER_LIFETIME = datetime.timedelta(days=365)
RENEW_WITHIN = datetime.timedelta(days=30)  # `berth up` issues a new server certificate this close to expiry
LOOPBACK_NAMES = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class TLSFiles:
    """The PEM files a TLS stack serves with: the server certificate and key, and the CA clients trust."""

    cert: Path
    key: Path
    ca: Path


def _write_private(path: Path, data: bytes) -> None:
    """A key file is owner-only from the moment it exists (never world-readable, even briefly), in an
    owner-only directory (like the state dir's keys/)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


Authority = tuple[x509.Certificate, ec.EllipticCurvePrivateKey]


def _load_authority(directory: Path, stem: str, common_name: str, issuer: Authority | None,
                    path_length: int) -> Authority:
    """A CA certificate and key kept in `directory` as STEM.pem / STEM-key.pem, made when absent: the root
    signs itself (`issuer` None), the issuing CA is signed by the root."""
    cert_path, key_path = directory / f"{stem}.pem", directory / f"{stem}-key.pem"
    if cert_path.exists() and key_path.exists():
        loaded = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        if not isinstance(loaded, ec.EllipticCurvePrivateKey):
            raise UserInputError(f"{key_path} is not an EC key; remove {directory} to make a new CA.")
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), loaded
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    issuer_cert, issuer_key = issuer if issuer else (None, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(name)
               .issuer_name(issuer_cert.subject if issuer_cert else name).public_key(key.public_key())
               .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
               .not_valid_after(now + CA_LIFETIME)
               .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False, key_agreement=False,
                                            key_cert_sign=True, crl_sign=True, encipher_only=False,
                                            decipher_only=False), critical=True)
               .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False))
    if issuer_cert is not None:
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False)
    cert = builder.sign(issuer_key, hashes.SHA256())
    _write_private(key_path, _key_pem(key))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _subject_names(addresses: tuple[str, ...]) -> list[x509.GeneralName]:
    names: list[x509.GeneralName] = []
    for value in dict.fromkeys((*LOOPBACK_NAMES, *addresses)):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(value)))
        except ValueError:
            names.append(x509.DNSName(value))
    return names


def _needs_new_server(cert_path: Path, ca: x509.Certificate, wanted: list[x509.GeneralName]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return True
    expiring = cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) < RENEW_WITHIN
    return expiring or cert.issuer != ca.subject or set(names) != set(wanted)


def ensure_private_ca(directory: Path, addresses: tuple[str, ...] = ()) -> TLSFiles:
    """The root CA (10 years; the one clients trust, `ca.pem`), an issuing CA it signed, and a server
    certificate (1 year) the issuing CA signed for loopback and `addresses`, made once in `directory`
    (keys 0600); the server certificate is issued again within 30 days of its expiry or when the names
    asked for changed. Served as leaf + issuing CA, the shape of a real cluster's chain: a client without
    the root then fails with OpenSSL's "unable to get local issuer certificate" (the documents' row)."""
    root = _load_authority(directory, "ca", "Berth private root CA", None, path_length=1)
    issuing, issuing_key = _load_authority(directory, "issuing-ca", "Berth issuing CA", root, path_length=0)
    files = TLSFiles(cert=directory / "server.pem", key=directory / "server-key.pem", ca=directory / "ca.pem")
    wanted = _subject_names(addresses)
    if not _needs_new_server(files.cert, issuing, wanted) and files.key.exists():
        return files
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Berth server")]))
            .issuer_name(issuing.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + SERVER_LIFETIME)
            .add_extension(x509.SubjectAlternativeName(wanted), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuing_key.public_key()),
                           critical=False)
            .sign(issuing_key, hashes.SHA256()))
    _write_private(files.key, _key_pem(key))
    pem = serialization.Encoding.PEM
    files.cert.write_bytes(cert.public_bytes(pem) + issuing.public_bytes(pem))
    return files


def operator_files(cert: Path | None, key: Path | None, ca: Path | None) -> TLSFiles | None:
    """The operator's own `--tls-cert/--tls-key/--tls-ca`, checked to exist; None when none is given."""
    given = {"--tls-cert": cert, "--tls-key": key, "--tls-ca": ca}
    if not any(given.values()):
        return None
    missing = [name for name, value in given.items() if value is None]
    if missing:
        raise UserInputError(f"Give all of --tls-cert, --tls-key and --tls-ca (missing {', '.join(missing)}).")
    for name, value in given.items():
        assert value is not None
        if not value.is_file():
            raise UserInputError(f"{name} {value} is not a readable file.")
    assert cert and key and ca
    return TLSFiles(cert=cert.resolve(), key=key.resolve(), ca=ca.resolve())
