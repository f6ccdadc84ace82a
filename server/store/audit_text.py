"""The audit chain's text: a record's canonical JSON, the hash that links it to the record before, and the way
back from a stored line to a row.

hash = SHA-256(prev_hash + canonical JSON of the record's fields, seq included), hex; the first record's prev_hash
is 64 zeros. The canonical text is what the chain stores (server/store/audit.py keeps a batch's texts one a line),
so anyone can recompute every hash from what a listing shows. It must never change: every stored hash depends on it.
"""

from __future__ import annotations

import hashlib
import json
import math
from json.encoder import encode_basestring_ascii  # type: ignore[attr-defined]  # the C encoder json.dumps uses
from typing import Any

from berth.contracts import AuditPhase, AuditRow
from berth.contracts.audit import RECORD_FIELDS

GENESIS = "0" * 64  # the first record's prev_hash
HASH_LENGTH = 64  # hex characters of a SHA-256
FIELDS = ("seq", "at", "phase", "request_id", "status", "tokens_in", "tokens_out", "key_id", "user",
          "endpoint_id", "copy_id", "latency_ms")


def canonical(fields: dict[str, Any]) -> str:
    """The record's fields as one JSON text: sorted keys, no spaces, ASCII (so never a line break), numbers as their
    type says."""
    typed = {**fields, "seq": int(fields["seq"]), "at": float(fields["at"]), "status": int(fields["status"]),
             "tokens_in": int(fields["tokens_in"]), "tokens_out": int(fields["tokens_out"]),
             "latency_ms": float(fields["latency_ms"])}
    return json.dumps({name: typed[name] for name in FIELDS}, sort_keys=True, separators=(",", ":"))


_PHASES = {phase: encode_basestring_ascii(phase.value) for phase in AuditPhase}


class BatchText:
    """`canonical` of a batch's new records, written out in the sorted key order: a third of json.dumps's cost, the
    same text (a test holds the two equal over generated batches). What a batch's records repeat is written once:
    the copy, endpoint and key ids (one run of the text) and the user (its end); a float json.dumps would spell
    as NaN or Infinity (the contract refuses them) takes json.dumps's path."""

    __slots__ = ("_middles", "_ends")

    def __init__(self) -> None:
        self._middles: dict[tuple[str | None, str, str | None], str] = {}
        self._ends: dict[str | None, str] = {}

    def record(self, seq: int, fields: tuple[Any, ...]) -> str:
        """The text of record `seq`, whose fields are in RECORD_FIELDS order (AuditBatch.rows())."""
        at, phase, request_id, status, tokens_in, tokens_out, key_id, user, endpoint_id, copy_id, latency = fields
        if not (math.isfinite(at) and math.isfinite(latency)):
            return canonical({"seq": seq, **dict(zip(RECORD_FIELDS, fields, strict=True)), "phase": phase.value})
        middle = self._middles.get((copy_id, endpoint_id, key_id))
        if middle is None:
            middle = self._middles[(copy_id, endpoint_id, key_id)] = (
                f'"copy_id":{_json_text(copy_id)},"endpoint_id":{_json_text(endpoint_id)},'
                f'"key_id":{_json_text(key_id)},"latency_ms":')
        end = self._ends.get(user)
        if end is None:
            end = self._ends[user] = f'"user":{_json_text(user)}}}'
        return (f'{{"at":{at!r},{middle}{latency!r},"phase":{_PHASES[phase]},'
                f'"request_id":{encode_basestring_ascii(request_id)},"seq":{seq},"status":{status},'
                f'"tokens_in":{tokens_in},"tokens_out":{tokens_out},{end}')


def _json_text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def links(prev_hash: str, texts: list[str]) -> list[str]:
    """The hashes of the records whose canonical texts are `texts`, in order, the first following the record whose
    hash is `prev_hash`: each is SHA-256(the hash before it + its text), hex. A batch's records at once: a call a
    record was a tenth of appending's chain work (docs/performance.md)."""
    hashes = []
    sha256 = hashlib.sha256
    for text in texts:
        prev_hash = sha256((prev_hash + text).encode()).hexdigest()
        hashes.append(prev_hash)
    return hashes


def link(prev_hash: str, text: str) -> str:
    """The hash of the record whose canonical text is `text`, following the record whose hash is `prev_hash`."""
    return links(prev_hash, [text])[0]


def row_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    return link(prev_hash, canonical(fields))


def stored_row(fields: dict[str, Any], prev_hash: str, digest: str) -> AuditRow:
    """The row a stored line is: its fields (the line parsed), the hash before it and its own."""
    return AuditRow.model_validate({**fields, "prev_hash": prev_hash, "hash": digest})
