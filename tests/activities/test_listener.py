"""Listener ownership read from /proc: a socket this process group listens on is its own; one a process in
another group listens on is foreign (how readiness refuses an orphan or a foreign server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from activities.listener import foreign_listener, listening_inodes


def test_own_listener_passes_and_another_groups_listener_is_refused() -> None:
    with socket.socket() as own:
        own.bind(("127.0.0.1", 0))
        own.listen()
        port = own.getsockname()[1]
        assert listening_inodes(port)
        assert foreign_listener(port, os.getpgid(0)) is None
    other = subprocess.Popen(
        [sys.executable, "-c", "import socket,sys; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen();"
         "print(s.getsockname()[1], flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert other.stdout is not None
        foreign_port = int(other.stdout.readline())
        refusal = foreign_listener(foreign_port, os.getpgid(0))
        assert refusal is not None and "held by another process" in refusal
        assert foreign_listener(foreign_port, other.pid) is None  # its own group: its own listener
    finally:
        other.kill()
        other.wait()


def test_a_port_nothing_listens_on_is_never_taken_for_the_rank() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # bound, not listening
    refusal = foreign_listener(port, os.getpgid(0))
    assert refusal is not None and "nothing on this host listens" in refusal
