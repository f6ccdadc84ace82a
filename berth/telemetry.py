"""Tracing: OpenTelemetry spans exported over OTLP/HTTP (protobuf) to `<BERTH_OTEL_ENDPOINT>/v1/traces`, or
nothing at all. Unset, every tracer is OpenTelemetry's no-op one (a span costs a function call or two); set,
a TracerProvider with a BatchSpanProcessor exports from a background thread, so a slow or absent collector
never delays or fails a request. An export failure is logged once, then nothing until an export succeeds.

What a span records is chosen by its caller (gateway/edge/proxy_tracing.py, server/routes/workflows.py, the
Temporal interceptor in berth/temporal.py) and by FastAPI's own server spans on the API; docs/operations.md lists
it, and what is never recorded. A URL's query is recorded with its values redacted (QueryRedactor)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from berth.settings import otel_endpoint

log = logging.getLogger("berth.telemetry")
# Seconds one export may take, retries included: the exporter thread, never a request, waits this long.
EXPORT_TIMEOUT_S = 5.0
# The exporter's own logger: a line per retry and per failed batch, which OnceLoggingExporter replaces
# with one line per outage.
EXPORTER_LOGGERS = ("opentelemetry.exporter.otlp.proto.http", "opentelemetry.exporter.otlp.common")
# Where a span may carry a URL's query: FastAPI's server spans set `url.query` (`DELETE /v1/secrets?ref=secret://…`);
# OpenTelemetry's HTTP instrumentations set the others. A query may name a secret or carry a token.
QUERY_ATTRIBUTES = ("url.query",)
URL_ATTRIBUTES = ("url.full", "http.url", "http.target")
REDACTED = "REDACTED"


def redacted_query(query: str) -> str:
    """The query with every value replaced (`ref=secret%3A…&x=1` → `ref=REDACTED&x=REDACTED`): the names say
    what was asked, the values stay out."""
    names = (part.split("=", 1)[0] for part in query.split("&") if part)
    return "&".join(f"{name}={REDACTED}" for name in names)


class QueryRedactor(SpanProcessor):
    """Redacts the values of a URL's query in a span's attributes as the span starts, which is when FastAPI and
    the HTTP instrumentations record the URL (an ended span's attributes can no longer change)."""

    def on_start(self, span: Span, parent_context: otel_context.Context | None = None) -> None:
        attributes: Mapping[str, Any] = span.attributes or {}
        for name in QUERY_ATTRIBUTES:
            value = attributes.get(name)
            if isinstance(value, str) and value:
                span.set_attribute(name, redacted_query(value))
        for name in URL_ATTRIBUTES:
            value = attributes.get(name)
            if isinstance(value, str) and "?" in value:
                path, _, query = value.partition("?")
                span.set_attribute(name, f"{path}?{redacted_query(query.partition('#')[0])}")

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


class OnceLoggingExporter(SpanExporter):
    """Wraps an exporter: the first failure of an outage is logged (one line, no span content), later ones
    are silent until an export succeeds again; an exception from the exporter is a failure, never raised."""

    def __init__(self, inner: SpanExporter, endpoint: str) -> None:
        self._inner, self._endpoint = inner, endpoint
        self._failing = False
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            result = self._inner.export(spans)
        except Exception as error:  # noqa: BLE001 — a tracing fault must never reach the traced code
            result, reason = SpanExportResult.FAILURE, type(error).__name__
        else:
            reason = "the collector did not accept the spans"
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                if self._failing:
                    log.info("span export to %s works again", self._endpoint)
                self._failing = False
            elif not self._failing:
                self._failing = True
                log.warning("span export to %s failed (%s); spans are dropped until it works again (logged once)",
                            self._endpoint, reason)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self._inner.force_flush(timeout_millis)


@dataclass(frozen=True)
class Tracing:
    """A process's tracing: its tracer (a no-op one when off) and the provider to flush at exit."""

    tracer: trace.Tracer
    provider: TracerProvider | None = None

    @property
    def enabled(self) -> bool:
        return self.provider is not None

    def flush(self, timeout_s: float = 5.0) -> bool:
        return self.provider.force_flush(int(timeout_s * 1000)) if self.provider is not None else True

    def shutdown(self) -> None:
        if self.provider is not None:
            self.provider.shutdown()


OFF = Tracing(trace.NoOpTracer())


def make_tracing(service_name: str, endpoint: str | None, timeout_s: float = EXPORT_TIMEOUT_S,
                 exporter: SpanExporter | None = None) -> Tracing:
    """Tracing to `endpoint` (a collector's base URL), or OFF when it is None. `exporter`: a test's own."""
    if endpoint is None:
        return OFF
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    for name in EXPORTER_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)  # OnceLoggingExporter says it once instead
    url = f"{endpoint}/v1/traces"
    inner = exporter or OTLPSpanExporter(endpoint=url, timeout=timeout_s)
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    provider.add_span_processor(QueryRedactor())  # first: before any other processor sees the span
    provider.add_span_processor(BatchSpanProcessor(OnceLoggingExporter(inner, url), schedule_delay_millis=1000))
    return Tracing(provider.get_tracer("berth"), provider)


def setup_tracing(service_name: str, environ: Mapping[str, str] = os.environ) -> Tracing:
    """A process's tracing from BERTH_OTEL_ENDPOINT, installed as OpenTelemetry's global provider when on (so
    `installed_tracer` and libraries find it); call once, at the process's start."""
    tracing = make_tracing(service_name, otel_endpoint(environ))
    if tracing.provider is not None:
        trace.set_tracer_provider(tracing.provider)
    return tracing


def installed_tracer(name: str) -> trace.Tracer | None:
    """The global provider's tracer when `setup_tracing` turned tracing on in this process, else None."""
    provider = trace.get_tracer_provider()
    return provider.get_tracer(name) if isinstance(provider, TracerProvider) else None


def current_trace_id() -> str | None:
    """The current span's trace id (32 hex digits), for log lines; None outside a recorded span."""
    context = trace.get_current_span().get_span_context()
    return format(context.trace_id, "032x") if context.is_valid else None
