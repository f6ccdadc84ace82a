"""What a stranger's connection may cost a Berth HTTP server (the API and its console, the endpoint proxy,
the model gateway): the request head's size, how long the head and each read of the body may take, and how
many connections are open at once, in all and per client address. Read once, where each server starts
(issue 29: a 10 MB header and slow bodies held memory and sockets without end)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from berth.errors import UserInputError

VARIABLES = {
    "max_header_bytes": "BERTH_HTTP_MAX_HEADER_BYTES",
    "header_timeout_s": "BERTH_HTTP_HEADER_TIMEOUT_S",
    "body_read_timeout_s": "BERTH_HTTP_BODY_READ_TIMEOUT_S",
    "max_connections": "BERTH_HTTP_MAX_CONNECTIONS",
    "max_connections_per_client": "BERTH_HTTP_MAX_CONNECTIONS_PER_CLIENT",
}


@dataclass(frozen=True)
class ConnectionLimits:
    # The request line and every header together (nginx's large_client_header_buffers is 4 × 8 KiB; a
    # Berth token with its claims is under 2 KiB). Beyond: 431.
    max_header_bytes: int = 16 * 1024
    header_timeout_s: float = 10.0  # connection (or the previous request) to the head's last byte: then 408
    body_read_timeout_s: float = 30.0  # the longest wait for the next bytes of a request body: then closed
    # Every caller of a single machine comes from 127.0.0.1 (LiteLLM, the gateway, load tests), so the
    # per-address bound is generous; the time limits are what free a slow client's sockets.
    max_connections: int = 4096
    max_connections_per_client: int = 512

    def __post_init__(self) -> None:
        for field in fields(self):
            if not getattr(self, field.name) > 0:
                raise UserInputError(f"{VARIABLES[field.name]} must be positive, got {getattr(self, field.name)}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> ConnectionLimits:
        values: dict[str, float | int] = {}
        for field in fields(cls):
            raw = environ.get(VARIABLES[field.name], "").strip()
            if not raw:
                continue
            try:
                values[field.name] = int(raw) if field.type in (int, "int") else float(raw)
            except ValueError:
                raise UserInputError(f"{VARIABLES[field.name]} must be a number, got {raw!r}") from None
        return cls(**values)  # type: ignore[arg-type]
