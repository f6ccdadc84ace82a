"""The audit chain's contracts: the records the endpoint proxy posts in batches (ATTEMPT, then SUCCESS or
FAILED, per request), the rows the store answers with, and the verdict of recomputing the chain.

A record carries facts about a request, never its content: no prompt, no key, no token. Every text field
is bounded, so one batch is bounded too (`MAX_AUDIT_BATCH` records)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from enum import Enum
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from berth.contracts.base import INT64_MAX, Payload, Response, json_float, json_int
from berth.contracts.choices import MAX_AUDIT_LIST as MAX_AUDIT_LIST  # re-exported: defined apart for the CLI

# Records per POST /v1/internal/audit, and the writer's batch: its ids are Berth's own (ASCII, bounded), so 1,000
# records as columns stay under 800 KB, within the API's 1 MiB body limit.
MAX_AUDIT_BATCH = 1000
ID_LENGTH = 128  # request, endpoint, copy, key ids and user names (the store's columns are this wide)
WRITER_LENGTH = 64
MAX_UNIX_TIME = 1e11  # the year 5138: past it a time is not a moment but a mistake


class AuditPhase(str, Enum):
    ATTEMPT = "ATTEMPT"  # the proxy accepted the request for an endpoint and starts serving it
    SUCCESS = "SUCCESS"  # it ended with a status below 400
    FAILED = "FAILED"  # it ended with 400 or above, or without a status (the client left, the proxy failed)


class AuditRecord(Payload):
    """One phase of one request, as the endpoint proxy saw it."""

    at: float = Field(ge=0, le=MAX_UNIX_TIME, allow_inf_nan=False)  # Unix time of the phase
    phase: AuditPhase
    request_id: str = Field(min_length=1, max_length=ID_LENGTH)  # links an ATTEMPT to its outcome
    status: int = Field(default=0, ge=0, le=999)  # the HTTP status sent; 0 for an ATTEMPT or none sent
    tokens_in: int = Field(default=0, ge=0, le=INT64_MAX)
    tokens_out: int = Field(default=0, ge=0, le=INT64_MAX)
    key_id: str | None = Field(default=None, max_length=ID_LENGTH)  # the API key's id, when one is used
    user: str | None = Field(default=None, max_length=ID_LENGTH)  # None: an anonymous caller (public)
    endpoint_id: str = Field(max_length=ID_LENGTH)
    copy_id: str | None = Field(default=None, max_length=ID_LENGTH)  # the copy first chosen, if any
    latency_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)  # from accepted to ended; 0 for an ATTEMPT


# A record's fields in AuditRecord's order: a batch's columns, and the tuples `AuditBatch.rows()` gives.
RECORD_FIELDS = ("at", "phase", "request_id", "status", "tokens_in", "tokens_out", "key_id", "user", "endpoint_id",
                 "copy_id", "latency_ms")
Id = Annotated[str, Field(max_length=ID_LENGTH)]
Column = Field(max_length=MAX_AUDIT_BATCH)


class AuditBatch(BaseModel):
    """Records as one writer sent them, a column a field: record i is item i of every column. Columns, not a list
    of objects: an object a record cost the API three times the CPU to read (docs/performance.md), and the API
    reads two records for every request the endpoint proxies serve. Its numbers are strict types, refused as
    `true` or `false` by pydantic-core itself, so it needs no Python check per record (unlike a Payload).

    (`writer`, `number`) names the batch: a writer that sends a batch again (its answer was lost) sends it whole
    under the same number, and the store keeps it once."""

    model_config = ConfigDict(frozen=True)

    writer: str = Field(min_length=1, max_length=WRITER_LENGTH)  # the endpoint proxy process's own id
    number: json_int(1, INT64_MAX)  # type: ignore[valid-type]  # the writer's count of its batches
    at: list[json_float(0, MAX_UNIX_TIME)] = Column  # type: ignore[valid-type]
    phase: list[AuditPhase] = Column
    request_id: list[Annotated[str, Field(min_length=1, max_length=ID_LENGTH)]] = Column
    status: list[json_int(0, 999)] = Column  # type: ignore[valid-type]
    tokens_in: list[json_int(0, INT64_MAX)] = Column  # type: ignore[valid-type]
    tokens_out: list[json_int(0, INT64_MAX)] = Column  # type: ignore[valid-type]
    key_id: list[Id | None] = Column
    user: list[Id | None] = Column
    endpoint_id: list[Id] = Column
    copy_id: list[Id | None] = Column
    latency_ms: list[json_float(0)] = Column  # type: ignore[valid-type]

    @model_validator(mode="after")
    def _columns_agree(self) -> AuditBatch:
        lengths = {name: len(getattr(self, name)) for name in RECORD_FIELDS}
        if len(set(lengths.values())) > 1:
            raise ValueError("the columns hold different numbers of records: "
                             + ", ".join(f"{name} {length}" for name, length in lengths.items()))
        return self

    @classmethod
    def of(cls, writer: str, number: int, records: Sequence[AuditRecord]) -> AuditBatch:
        columns = {name: [getattr(record, name) for record in records] for name in RECORD_FIELDS}
        return cls.model_validate({"writer": writer, "number": number, **columns})

    def __len__(self) -> int:
        return len(self.at)

    def rows(self) -> Iterator[tuple[Any, ...]]:
        """Each record's fields, in RECORD_FIELDS order."""
        return zip(*(getattr(self, name) for name in RECORD_FIELDS), strict=True)

    def records(self) -> list[AuditRecord]:
        return [AuditRecord.model_validate(dict(zip(RECORD_FIELDS, row, strict=True))) for row in self.rows()]


class AuditAppended(Response):
    appended: int  # rows added to the chain
    duplicates: int = 0  # records not added: the batch was in the chain already (sent again)


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
