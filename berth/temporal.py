"""The one Temporal client factory: pydantic data converter plus an encrypting payload codec,
so workflow histories (and the Temporal UI) never hold a secret or a generated key in clear, and a
payload Berth did not encrypt is refused rather than acted on."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from opentelemetry.trace import Tracer
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, Interceptor
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import DataConverter, EncodingPayloadConverter, PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.service import TLSConfig

from berth.errors import UserInputError
from berth.security import Cipher
from berth.settings import TEMPORAL_NAMESPACE, TemporalTLS
from berth.telemetry import installed_tracer

_ENCODING = b"binary/berth-aes-gcm"
# What the codec hands on in place of a payload it refuses: the converter turns it into a failure at the
# point the payload would be used, so Temporal drops the signal, rejects the update or fails the workflow.
# Raising in the codec instead would fail the whole workflow task — a user's workflow wedged on one
# stranger's signal, retried for ever.
_REFUSED = "binary/berth-refused"
# Payloads the Temporal server itself writes, which no codec ever saw: the details of an activity cancelled
# before any worker started it. A fixed constant, so it carries no authority; refused, it failed the copy
# workflow whose stop raced an adopt_rank still waiting for its node (and its GPUs stayed reserved).
_SERVER_MADE = frozenset({(b"json/plain", b'"ACTIVITY_ID_NOT_STARTED"')})
UNENCRYPTED = "UnencryptedPayload"


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload with the cluster's data key (AES-256-GCM); refuses any other payload."""

    def __init__(self, cipher: Cipher) -> None:
        self._cipher = cipher

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": _ENCODING}, data=self._cipher.encrypt(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decode_one(payload) for payload in payloads]

    def _decode_one(self, payload: Payload) -> Payload:
        if (payload.metadata.get("encoding"), payload.data) in _SERVER_MADE:
            return payload
        if payload.metadata.get("encoding") != _ENCODING:
            # Whoever reaches Temporal's port can write a plain payload: it carries no Berth authority.
            return _refused("it is not encrypted with the cluster's data key")
        try:
            plain = self._cipher.decrypt(payload.data)
        except (InvalidTag, ValueError):
            return _refused("it is encrypted with another key")
        inner = Payload()
        inner.ParseFromString(plain)
        return inner


def _refused(why: str) -> Payload:
    return Payload(metadata={"encoding": _REFUSED.encode()}, data=why.encode())


class _RefusedPayloadConverter(EncodingPayloadConverter):
    """Never encodes; decoding a refused payload fails with the codec's reason."""

    @property
    def encoding(self) -> str:
        return _REFUSED

    def to_payload(self, value: Any) -> Payload | None:
        return None

    def from_payload(self, payload: Payload, type_hint: type | None = None) -> Any:
        raise ApplicationError(
            f"Refused a Temporal payload: {payload.data.decode(errors='replace')[:80]}. Only Berth's own "
            "components (the API, the control worker, node agents) may start, signal or update its workflows.",
            type=UNENCRYPTED, non_retryable=True,
        )


class BerthPayloadConverter(PydanticPayloadConverter):
    """Pydantic conversion plus the refusal of payloads the codec did not accept (nullary for the SDK)."""

    def __init__(self) -> None:
        super().__init__()
        self._set_converters(*self.converters.values(), _RefusedPayloadConverter())


def data_converter(cipher: Cipher | None) -> DataConverter:
    if cipher is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_converter_class=BerthPayloadConverter,
                               payload_codec=EncryptionCodec(cipher))


def tls_config(tls: TemporalTLS | None) -> TLSConfig | bool:
    """The SDK's TLS settings from Berth's (False: plain gRPC)."""
    if tls is None:
        return False

    def read(path: Path | None) -> bytes | None:
        if path is None:
            return None
        try:
            return path.read_bytes()
        except OSError as error:
            raise UserInputError(f"Cannot read the Temporal TLS file {path} ({error.strerror}).") from None

    return TLSConfig(server_root_ca_cert=read(tls.ca), client_cert=read(tls.cert),
                     client_private_key=read(tls.key), domain=tls.server_name)


def interceptors(tracer: Tracer | None) -> list[Interceptor]:
    """Temporal's tracing interceptor when this process traces (berth/telemetry.py), else none. On the client
    it also reaches every worker built from it: workflow and activity spans chain across processes through
    the `_tracer-data` header (a traceparent, nothing else), and workflow spans are made outside the
    sandbox, once, never on replay (temporalio.contrib.opentelemetry), so workflows stay deterministic."""
    if tracer is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    return [TracingInterceptor(tracer)]


async def connect(address: str, cipher: Cipher | None, namespace: str = TEMPORAL_NAMESPACE,
                  tls: TemporalTLS | None = None, tracer: Tracer | None = None) -> Client:
    """`tls` defaults to the `BERTH_TEMPORAL_TLS_*` environment (see `TemporalTLS`); `tracer` to the
    process's when `setup_tracing` turned tracing on (no interceptor otherwise)."""
    return await Client.connect(address, namespace=namespace, data_converter=data_converter(cipher),
                                tls=tls_config(tls if tls is not None else TemporalTLS.from_env()),
                                interceptors=interceptors(tracer or installed_tracer("berth.temporal")))
