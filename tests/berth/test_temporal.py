"""Unit tests of the Temporal codec (plain payloads refused, not passed through), the API's workflow-input
grant and the control worker's check of it, and the TLS settings."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from activities.authorization import UNAUTHORIZED, InputAuthority
from berth.errors import UserInputError
from berth.security import Cipher, Identity, SigningKey, TokenVerifier
from berth.settings import TemporalTLS
from berth.temporal import UNENCRYPTED, data_converter, tls_config
from catalog.entry import find_entry
from catalog.render import render, resolve_values
from workflows.payloads import Owner, PoolInput, ScaleRequest


def _converter(tmp_path: Path, name: str = "data.key"):  # type: ignore[no-untyped-def]
    return data_converter(Cipher.load_or_create(tmp_path, name))


def test_codec_round_trips_berth_payloads(tmp_path: Path) -> None:
    converter = _converter(tmp_path)
    request = ScaleRequest(replicas=3, reason="by bob")
    encoded = asyncio.run(converter.encode([request]))
    assert b"by bob" not in encoded[0].SerializeToString()
    assert asyncio.run(converter.decode(encoded, [ScaleRequest])) == [request]


@pytest.mark.parametrize("source", ["plain", "other key"])
def test_codec_refuses_payloads_berth_did_not_encrypt(tmp_path: Path, source: str) -> None:
    request = ScaleRequest(replicas=99)
    if source == "plain":  # what a stock temporalio client (the CLI, the UI) sends
        payloads = asyncio.run(data_converter(None).encode([request]))
    else:
        payloads = asyncio.run(_converter(tmp_path, "other.key").encode([request]))
    with pytest.raises(ApplicationError) as refused:
        asyncio.run(_converter(tmp_path).decode(payloads, [ScaleRequest]))
    assert refused.value.type == UNENCRYPTED and refused.value.non_retryable
    assert "Refused a Temporal payload" in refused.value.message


def test_the_servers_own_not_started_detail_passes_and_nothing_else_plain_does(tmp_path: Path) -> None:
    """An activity cancelled before any worker started it comes back with the server's own detail, which no
    codec saw: refused, it failed the copy workflow whose stop raced an adoption (its GPUs stayed held)."""
    converter = _converter(tmp_path)
    made_by_server = asyncio.run(data_converter(None).encode(["ACTIVITY_ID_NOT_STARTED"]))
    assert asyncio.run(converter.decode(made_by_server, [str])) == ["ACTIVITY_ID_NOT_STARTED"]
    for other in ("ACTIVITY_ID_NOT_STARTED ", "ANYTHING_ELSE"):
        with pytest.raises(ApplicationError):
            asyncio.run(converter.decode(asyncio.run(data_converter(None).encode([other])), [str]))
    with pytest.raises(ValueError, match="validation error"):  # the constant cannot pose as a Berth payload
        asyncio.run(converter.decode(made_by_server, [ScaleRequest]))


def _input(workflow_id: str = "svc-1", user: str = "bob") -> PoolInput:
    entry = find_entry("GPT-OSS 20B")
    definition = render(entry, resolve_values(entry, {}))
    return PoolInput(workflow_id=workflow_id, endpoint_id="ep-1", owner=Owner(user=user),
                        definition=definition)


def _verify(tmp_path: Path, input: PoolInput, workflow_id: str = "svc-1") -> None:
    signing = SigningKey.load_or_create(tmp_path)
    authority = InputAuthority(TokenVerifier.from_jwks(signing.jwks()), "berth-control")
    environment = ActivityEnvironment()
    environment.info = dataclasses.replace(environment.info, workflow_id=workflow_id)
    asyncio.run(environment.run(authority.verify_service_input, input))


def _signed(tmp_path: Path, input: PoolInput) -> PoolInput:
    grant = SigningKey.load_or_create(tmp_path).workflow_grant(input.owner.user, input.workflow_id, input.digest())
    return input.model_copy(update={"grant": grant})


def test_a_signed_input_is_accepted_after_a_round_trip_through_json(tmp_path: Path) -> None:
    signed = _signed(tmp_path, _input())
    _verify(tmp_path, PoolInput.model_validate_json(signed.model_dump_json()))


@pytest.mark.parametrize("attack", ["unsigned", "tampered", "other workflow", "other key", "not a grant"])
def test_an_input_the_api_did_not_sign_is_refused(tmp_path: Path, attack: str) -> None:
    signed = _signed(tmp_path, _input())
    forged = {
        "unsigned": _input(),
        "tampered": signed.model_copy(update={"owner": Owner(user="admin")}),
        "other workflow": signed.model_copy(update={"workflow_id": "svc-2"}),
        "other key": _signed(tmp_path / "elsewhere", _input()),
        "not a grant": _input().model_copy(update={"grant": SigningKey.load_or_create(tmp_path).api_token(
            Identity(user="bob"))}),
    }[attack]
    with pytest.raises(ApplicationError) as refused:
        _verify(tmp_path, forged, workflow_id=forged.workflow_id)
    assert refused.value.type == UNAUTHORIZED and refused.value.non_retryable
    assert refused.value.message.startswith("Refused to run: ")


def test_tls_settings_read_the_pem_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert TemporalTLS.from_env() is None and tls_config(None) is False
    for name in ("cert", "key", "ca"):
        (tmp_path / f"{name}.pem").write_bytes(f"{name} pem".encode())
        monkeypatch.setenv(f"BERTH_TEMPORAL_TLS_{name.upper()}", str(tmp_path / f"{name}.pem"))
    config = tls_config(TemporalTLS.from_env())
    assert not isinstance(config, bool)
    assert (config.client_cert, config.client_private_key, config.server_root_ca_cert) == \
        (b"cert pem", b"key pem", b"ca pem")
    monkeypatch.delenv("BERTH_TEMPORAL_TLS_KEY")
    with pytest.raises(UserInputError, match="BERTH_TEMPORAL_TLS_KEY"):
        TemporalTLS.from_env()
    monkeypatch.setenv("BERTH_TEMPORAL_TLS_KEY", str(tmp_path / "missing.pem"))
    with pytest.raises(UserInputError, match="Cannot read the Temporal TLS file"):
        tls_config(TemporalTLS.from_env())
