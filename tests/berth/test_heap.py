"""berth/heap.py and berth/settled_server.py: a Berth HTTP server settles its heap once it has started — what
startup made frozen out of later collections, the young threshold raised — and still answers, and still frees
reference cycles (issue 33: the cyclic collector took ~10 % of the endpoint proxy's CPU under load). Run in a
process of its own: the test process settles its heap on its own terms (tests/settled_heap.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from berth.heap import YOUNG_THRESHOLD

pytestmark = pytest.mark.timeout(60)

SERVER = textwrap.dedent("""
    import gc, json, threading, urllib.request, weakref
    import uvicorn
    from berth.processes import free_port
    from berth.settled_server import SettlingServer

    before = {"frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0]}

    class Cycle:
        pass

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        # A reference cycle made after the heap settled: still found and freed by a collection.
        cycle = Cycle()
        cycle.me = cycle
        gone = weakref.ref(cycle)
        del cycle
        gc.collect()
        body = json.dumps({"frozen": gc.get_freeze_count(), "young": gc.get_threshold()[0],
                           "cycle_freed": gone() is None}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": body})

    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    answer = {}

    def ask():
        import time
        for _ in range(200):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as response:
                    answer.update(json.load(response))
                break
            except OSError:
                time.sleep(0.05)
        server.should_exit = True

    server = SettlingServer(config)
    threading.Thread(target=ask, daemon=True).start()
    server.run()
    print(json.dumps({"before": before, "after": answer}))
""")


def test_a_started_server_has_its_heap_frozen_and_a_raised_young_threshold_and_still_frees_cycles() -> None:
    out = subprocess.run([sys.executable, "-c", SERVER], capture_output=True, text=True, timeout=50, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["before"] == {"frozen": 0, "young": 700}  # CPython's defaults until the server has started
    after = result["after"]
    assert after["frozen"] > 1000  # every module, function and class startup made
    assert after["young"] == YOUNG_THRESHOLD
    assert after["cycle_freed"] is True
