"""Log lines: `configure_logging(component)` sets a process's root logger to plain text (the format Berth
always used) or, with BERTH_LOG_FORMAT=json, one JSON object per line: ts, level, logger, message,
component, request_id and trace_id when known, exc_info. The request id is set per request by the proxies
(`request_id.set(...)` in a contextvar: each asyncio task sees its own).

Secrets stay out by construction: a line holds the message its caller formatted, and Berth's callers log
no header, body or key (the proxies log upstream URLs and error kinds only)."""

from __future__ import annotations

import contextvars
import json
import logging
import os
import time
from collections.abc import Mapping

from berth.settings import log_format
from berth.telemetry import current_trace_id

TEXT_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("berth_request_id", default=None)


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (json.dumps escapes any newline in the message)."""

    converter = staticmethod(time.gmtime)  # timestamps in UTC, as the trailing Z says

    def __init__(self, component: str) -> None:
        super().__init__()
        self.component = component

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
            "level": record.levelname, "logger": record.name, "message": record.getMessage(),
            "component": self.component,
        }
        known = request_id.get()
        if known is not None:
            line["request_id"] = known
        trace_id = current_trace_id()
        if trace_id is not None:
            line["trace_id"] = trace_id
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def formatter(component: str, environ: Mapping[str, str] = os.environ) -> logging.Formatter:
    return JsonFormatter(component) if log_format(environ) == "json" else logging.Formatter(TEXT_FORMAT)


def configure_logging(component: str, level: int = logging.INFO, environ: Mapping[str, str] = os.environ) -> None:
    """The root logger writes to stderr in BERTH_LOG_FORMAT's format; httpx's per-request lines are quietened
    (one per poll and scrape drowns the log)."""
    handler = logging.StreamHandler()
    handler.setFormatter(formatter(component, environ))
    logging.basicConfig(level=level, handlers=[handler], force=True)
    logging.getLogger("httpx").setLevel(logging.WARNING)
