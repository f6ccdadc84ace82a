"""The audit chain's contracts: the records the endpoint proxy posts in batches (ATTEMPT, then SUCCESS or
FAILED, per request), the rows the store answers with, and the verdict of recomputing the chain.

A record carries facts about a request, never its content: no prompt, no key, no token. Every text field
is bounded, so one batch is bounded too (`MAX_AUDIT_BATCH` records)."""

from __future__ import annotations

from enum import Enum

from pydantic import Field

from berth.contracts.base import INT64_MAX, Payload, Response
from berth.contracts.choices import MAX_AUDIT_LIST as MAX_AUDIT_LIST  # re-exported: defined apart for the CLI

MAX_AUDIT_BATCH = 1000  # records per POST /v1/internal/audit; the writer sends at most 500 (under 1 MiB)
ID_LENGTH = 128  # request, endpoint, copy, key ids and user names (the store's columns are this wide)


class AuditPhase(str, Enum):
    ATTEMPT = "ATTEMPT"  # the proxy accepted the request for an endpoint and starts serving it
    SUCCESS = "SUCCESS"  # it ended with a status below 400
    FAILED = "FAILED"  # it ended with 400 or above, or without a status (the client left, the proxy failed)


class AuditRecord(Payload):
    """One phase of one request, as the endpoint proxy saw it."""

    at: float = Field(ge=0)  # Unix time of the phase
    phase: AuditPhase
    request_id: str = Field(min_length=1, max_length=ID_LENGTH)  # links an ATTEMPT to its outcome
    status: int = Field(default=0, ge=0, le=999)  # the HTTP status sent; 0 for an ATTEMPT or none sent
    tokens_in: int = Field(default=0, ge=0, le=INT64_MAX)
    tokens_out: int = Field(default=0, ge=0, le=INT64_MAX)
    key_id: str | None = Field(default=None, max_length=ID_LENGTH)  # the API key's id, when one is used
    user: str | None = Field(default=None, max_length=ID_LENGTH)  # None: an anonymous caller (public)
    endpoint_id: str = Field(max_length=ID_LENGTH)
    copy_id: str | None = Field(default=None, max_length=ID_LENGTH)  # the copy first chosen, if any
    latency_ms: float = Field(default=0.0, ge=0)  # from accepted to ended; 0 for an ATTEMPT


class AuditBatch(Payload):
    records: list[AuditRecord] = Field(max_length=MAX_AUDIT_BATCH)


class AuditAppended(Response):
    appended: int  # rows added to the chain
    duplicates: int = 0  # records already in it (a batch retried after an answer was lost)


class AuditRow(Response):
    """A stored record with its place in the chain: hash = SHA-256(prev_hash + canonical JSON of the
    row's other fields), hex; the first row's prev_hash is 64 zeros."""

    seq: int
    at: float
    phase: AuditPhase
    request_id: str
    status: int
    tokens_in: int
    tokens_out: int
    key_id: str | None
    user: str | None
    endpoint_id: str
    copy_id: str | None
    latency_ms: float
    prev_hash: str
    hash: str


class AuditVerdict(Response):
    ok: bool
    rows: int  # rows checked (the whole chain when ok; up to the broken one otherwise)
    first_broken_seq: int | None = None
    message: str
