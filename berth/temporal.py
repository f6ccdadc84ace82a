"""The one Temporal client factory: pydantic data converter plus an encrypting payload codec,
so workflow histories (and the Temporal UI) never hold a secret or a generated key in clear."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter, PayloadCodec

from berth.security import Cipher
from berth.settings import TEMPORAL_NAMESPACE

_ENCODING = b"binary/berth-aes-gcm"


class EncryptionCodec(PayloadCodec):
    """Encrypts every payload with the cluster's data key (AES-256-GCM)."""

    def __init__(self, cipher: Cipher) -> None:
        self._cipher = cipher

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            Payload(metadata={"encoding": _ENCODING}, data=self._cipher.encrypt(p.SerializeToString()))
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        decoded: list[Payload] = []
        for payload in payloads:
            if payload.metadata.get("encoding") != _ENCODING:
                decoded.append(payload)  # written before encryption was on, or by another codec
                continue
            inner = Payload()
            inner.ParseFromString(self._cipher.decrypt(payload.data))
            decoded.append(inner)
        return decoded


def data_converter(cipher: Cipher | None) -> DataConverter:
    if cipher is None:
        return pydantic_data_converter
    return dataclasses.replace(pydantic_data_converter, payload_codec=EncryptionCodec(cipher))


async def connect(address: str, cipher: Cipher | None, namespace: str = TEMPORAL_NAMESPACE) -> Client:
    return await Client.connect(address, namespace=namespace, data_converter=data_converter(cipher))
