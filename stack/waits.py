"""Waits: what `berth up` and `berth down` wait to see through the API — the node agents registered
and ready, every copy's GPUs released — each with a deadline."""

from __future__ import annotations

import contextlib
import ssl
import time
from collections.abc import Sequence
from pathlib import Path

from berth.processes import tail
from berth.settings import ClientConfig
from stack.components import Child


def wait_nodes_ready(api_url: str, token: str, count: int, children: Sequence[Child],
                     verify: ssl.SSLContext | bool, timeout_s: float = 60) -> None:
    """Until `count` node agents are ready; fails at once when a component exits meanwhile."""
    import httpx

    deadline = time.monotonic() + timeout_s
    # One client for the whole wait: a request of its own made a TLS context each time (~20 ms of CPU, 5 a second).
    with httpx.Client(verify=verify, headers={"Authorization": f"Bearer {token}"}, timeout=2) as client:
        while time.monotonic() < deadline:
            for child in children:
                if child.process.poll() is not None:
                    raise RuntimeError(f"{child.name} exited with status {child.process.returncode}; "
                                       f"see {child.log}:\n{tail(child.log, 15)}")
            with contextlib.suppress(httpx.HTTPError):
                nodes = client.get(f"{api_url}/v1/nodes").json()
                if sum(1 for n in nodes if n.get("state") == "ready") >= count:
                    return
            time.sleep(0.2)
    raise TimeoutError(f"{count} node agent(s) did not register within {timeout_s:g} s")


def wait_copies_released(api_url: str, client_config: Path, verify: ssl.SSLContext | bool, timeout_s: float) -> None:
    """Once the node agents stopped their ranks, give the control worker time to record it (every
    copy interrupted, its GPUs released) before it stops too: otherwise the next `berth up` starts
    from workflows that still believe their copies serve. Gives up quietly: `berth down` goes on."""
    import httpx

    try:
        token = ClientConfig.model_validate_json(client_config.read_text()).token
    except (OSError, ValueError):
        return
    deadline = time.monotonic() + timeout_s
    with httpx.Client(verify=verify, headers={"Authorization": f"Bearer {token}"}, timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                nodes = client.get(f"{api_url}/v1/nodes").json()
            except (httpx.HTTPError, ValueError):
                return
            if not any(n.get("allocated") for n in nodes):
                return
            time.sleep(0.1)
