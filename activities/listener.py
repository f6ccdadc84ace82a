"""Listener ownership: whether the sockets listening on a TCP port of this host belong to one process
group, read from /proc. Readiness uses it to prove the server answering a copy's port is that copy's rank,
not an orphan or another user's process on the same port (engine-independent, no secret needed)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TCP_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TCP_LISTEN = "0A"


def listening_inodes(port: int, tables: tuple[Path, ...] = TCP_TABLES) -> set[int]:
    """Inodes of the sockets listening on `port` (any address, IPv4 or IPv6) in this network namespace."""
    inodes = set()
    for table in tables:
        with contextlib.suppress(OSError):
            for line in table.read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == TCP_LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(int(fields[9]))
    return inodes


def group_socket_inodes(pgid: int, proc: Path = Path("/proc")) -> set[int]:
    """Inodes of every socket the processes of group `pgid` hold open (a rank and its engine children)."""
    inodes = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if os.getpgid(int(entry.name)) != pgid:
                continue
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith("socket:["):
                        inodes.add(int(target[8:-1]))
    return inodes


def foreign_listener(port: int, pgid: int) -> str | None:
    """Why the listener on `port` is not process group `pgid`'s, or None when every listener is its own.
    Every one must be: with SO_REUSEPORT a second process shares the port and gets some connections."""
    listening = listening_inodes(port)
    if not listening:
        return f"nothing on this host listens on port {port}, yet it answered: not this copy's rank"
    if listening - group_socket_inodes(pgid):
        return (f"port {port} is held by another process (not this copy's rank, process group {pgid}); "
                f"an orphaned rank or a foreign server answered in its place")
    return None
