"""BERTH_LOG_FORMAT=json: each record is one JSON line with the component, and the request id (and trace id)
of the request it was logged for; text stays today's format."""

from __future__ import annotations

import io
import json
import logging

import pytest

from berth.log_format import TEXT_FORMAT, formatter, request_id
from berth.telemetry import make_tracing
from tests.telemetry.otlp_receiver import OtlpReceiver

pytestmark = pytest.mark.timeout(30)


def _logged(environ: dict[str, str], emit: object) -> list[str]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter("proxy", environ))
    log = logging.getLogger("berth.test-json")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        assert callable(emit)
        emit(log)
    finally:
        log.removeHandler(handler)
    return stream.getvalue().splitlines()


def test_json_lines_parse_and_carry_the_request_id(receiver: OtlpReceiver) -> None:
    tracing = make_tracing("berth-test", receiver.url)

    def emit(log: logging.Logger) -> None:
        log.info("outside any request")
        token = request_id.set("req-7")
        try:
            with tracing.tracer.start_as_current_span("work") as span:
                log.warning("upstream %s failed:\nline two", "http://copy")
                trace_id = format(span.get_span_context().trace_id, "032x")
            try:
                raise ValueError("boom")
            except ValueError:
                log.exception("it broke")
        finally:
            request_id.reset(token)
        emit.trace_id = trace_id  # type: ignore[attr-defined]

    lines = _logged({"BERTH_LOG_FORMAT": "json"}, emit)
    tracing.shutdown()
    assert len(lines) == 3
    first, second, third = (json.loads(line) for line in lines)
    assert first["component"] == "proxy" and first["level"] == "INFO" and "request_id" not in first
    assert first["ts"].endswith("Z") and first["logger"] == "berth.test-json"
    assert second["request_id"] == "req-7" and second["message"] == "upstream http://copy failed:\nline two"
    assert second["trace_id"] == emit.trace_id  # type: ignore[attr-defined]
    assert third["request_id"] == "req-7" and "ValueError: boom" in third["exc_info"]


def test_text_is_the_default_format() -> None:
    assert formatter("proxy", {})._fmt == TEXT_FORMAT
    lines = _logged({}, lambda log: log.info("plain"))
    assert lines[0].endswith("berth.test-json INFO plain")
    with pytest.raises(SystemExit):
        formatter("proxy", {"BERTH_LOG_FORMAT": "yaml"})


def test_the_collector_url_is_a_plain_http_base_url_without_credentials() -> None:
    from berth.settings import otel_endpoint

    assert otel_endpoint({}) is None and otel_endpoint({"BERTH_OTEL_ENDPOINT": " "}) is None
    assert otel_endpoint({"BERTH_OTEL_ENDPOINT": "http://127.0.0.1:4318/"}) == "http://127.0.0.1:4318"
    with pytest.raises(SystemExit, match="must not carry credentials; put them in OTEL_EXPORTER_OTLP_HEADERS"):
        otel_endpoint({"BERTH_OTEL_ENDPOINT": "https://user:s3cret@collector:4318"})
    for bad in ("collector:4318", "ftp://collector", "http://collector:4318/?token=x"):
        with pytest.raises(SystemExit, match="must be a collector's http"):
            otel_endpoint({"BERTH_OTEL_ENDPOINT": bad})
