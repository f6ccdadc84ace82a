"""What a Berth HTTP server refuses a stranger's connection for, and how (issue 29): the process's count of
open connections, in all and per client address, and the one plain-text line each refusal answers with.
berth/http_connection.py enforces them, with ConnectionLimits (berth/settings/connections.py), on every
connection of the API, the endpoint proxy and the model gateway.

uvicorn bounds neither a request head's size (httptools buffers a 10 MB header whole) nor how long a head or a
body may take, and counts no connections per client: a stranger could hold memory and sockets without end."""

from __future__ import annotations

from collections import Counter

from berth.settings.connections import ConnectionLimits

REASONS = {408: b"Request Timeout", 431: b"Request Header Fields Too Large", 503: b"Service Unavailable"}


class OpenConnections:
    """This process's open connections, per client address (one server per process)."""

    def __init__(self) -> None:
        self.by_client: Counter[str] = Counter()
        self.total = 0

    def admit(self, client: str, limits: ConnectionLimits) -> bool:
        if self.total >= limits.max_connections or self.by_client[client] >= limits.max_connections_per_client:
            return False
        self.by_client[client] += 1
        self.total += 1
        return True

    def release(self, client: str) -> None:
        self.total -= 1
        self.by_client[client] -= 1
        if self.by_client[client] <= 0:
            del self.by_client[client]  # the counter's keys stay bounded by the open connections


OPEN = OpenConnections()


def refusal(status: int, line: str) -> bytes:
    """A refusal's whole answer: one line, and the connection closes after it."""
    body = line.encode() + b"\n"
    return (b"HTTP/1.1 %d %b\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%b" % (status, REASONS[status], len(body), body))
