"""The chain's canonical text written out by hand (server/store/audit_text.py `BatchText`, the append's fast
path) is byte for byte what `canonical` — json.dumps, sorted keys — gives for the same row, which verify()
recomputes: over generated records (any Unicode in the strings, None where allowed, floats of every size,
up to the contract's bound)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.contracts import AuditPhase, AuditRecord
from berth.contracts.audit import ID_LENGTH, INT64_MAX, MAX_UNIX_TIME, RECORD_FIELDS
from server.store.audit_text import BatchText, canonical

ids = st.text(min_size=1, max_size=ID_LENGTH)
floats = st.floats(min_value=0, max_value=MAX_UNIX_TIME, allow_nan=False, allow_infinity=False)

records = st.builds(
    AuditRecord, at=floats, phase=st.sampled_from(list(AuditPhase)), request_id=ids,
    status=st.integers(0, 999), tokens_in=st.integers(0, INT64_MAX), tokens_out=st.integers(0, INT64_MAX),
    key_id=st.none() | ids, user=st.none() | ids, endpoint_id=st.text(max_size=ID_LENGTH),
    copy_id=st.none() | ids, latency_ms=floats)


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(records, min_size=1, max_size=4), seq=st.integers(1, INT64_MAX - 4))
def test_the_fast_canonical_text_is_json_dumps(batch: list[AuditRecord], seq: int) -> None:
    texts = BatchText()  # one for the batch: strings the records share are encoded once
    for offset, record in enumerate(batch):
        expected = canonical({"seq": seq + offset, **record.model_dump(mode="json")})
        fields = tuple(getattr(record, name) for name in RECORD_FIELDS)
        assert texts.record(seq + offset, fields) == expected
