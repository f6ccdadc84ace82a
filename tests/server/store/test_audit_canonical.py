"""The chain's canonical text written out by hand (server/store/audit.py `record_canonical`, the append's fast
path) is byte for byte what `canonical` — json.dumps, sorted keys — gives for the same row, which verify()
recomputes: over generated records (any Unicode in the strings, None where allowed, floats of every size,
non-finite ones included)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from berth.contracts import AuditPhase, AuditRecord
from berth.contracts.audit import ID_LENGTH, INT64_MAX
from server.store.audit import canonical, record_canonical

ids = st.text(min_size=1, max_size=ID_LENGTH)
floats = st.floats(min_value=0, allow_nan=False)  # inf included: the contract's ge=0 lets it through

records = st.builds(
    AuditRecord, at=floats, phase=st.sampled_from(list(AuditPhase)), request_id=ids,
    status=st.integers(0, 999), tokens_in=st.integers(0, INT64_MAX), tokens_out=st.integers(0, INT64_MAX),
    key_id=st.none() | ids, user=st.none() | ids, endpoint_id=st.text(max_size=ID_LENGTH),
    copy_id=st.none() | ids, latency_ms=floats)


@settings(max_examples=400, deadline=None)
@given(record=records, seq=st.integers(1, INT64_MAX))
def test_the_fast_canonical_text_is_json_dumps(record: AuditRecord, seq: int) -> None:
    assert record_canonical(seq, record) == canonical({"seq": seq, **record.model_dump(mode="json")})
