"""The LiteLLM auth hook's caller-assertion verifier, in the LiteLLM interpreter it runs in: once the
control plane's key set has been fetched, an API outage that outlasts the cache never turns identified
callers into 401s — neither the request that finds the JWKS unreachable nor the ones in its retry window
(the chaos soak saw three 401s in a row after an API kill)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from berth.security import Identity, SigningKey
from berth.settings import repo_root

pytestmark = [pytest.mark.litellm, pytest.mark.timeout(120)]

SCRIPT = r"""
import asyncio, http.server, json, sys, threading
from gateway.litellm_hooks.auth import AssertionVerifier

jwks, token, audience = sys.argv[1].encode(), sys.argv[2], sys.argv[3]

class Keys(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(jwks)))
        self.end_headers()
        self.wfile.write(jwks)

    def log_message(self, *args):
        pass

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
threading.Thread(target=server.serve_forever, daemon=True).start()

async def main():
    verifier = AssertionVerifier(f"http://127.0.0.1:{server.server_address[1]}/jwks", audience)
    await verifier.warm_up()
    first = await verifier.verify(token) is not None
    server.shutdown()
    server.server_close()  # the control plane is gone
    verifier._jwks.jwk_set_cache.put(None)  # and the cached set has expired (its 60 s lifespan)
    remembered = await verifier.verify(token) is not None  # verified once: kept until its exp
    during = []
    for _ in range(3):
        verifier._verified.clear()  # as assertions the proxy minted since: each checked against the keys
        during.append(await verifier.verify(token) is not None)
    print(json.dumps({"first": first, "remembered": remembered, "during_outage": during}))

asyncio.run(main())
"""


def test_a_caller_stays_identified_through_an_api_outage(tmp_path: Path) -> None:
    key = SigningKey.load_or_create(tmp_path)
    token = key.caller_assertion(Identity(user="alice", org="acme"), "ep-1")
    python = repo_root() / ".venv-litellm" / "bin" / "python"
    result = subprocess.run([str(python), "-c", SCRIPT, json.dumps(key.jwks()), token, "ep-1"],
                            capture_output=True, text=True, timeout=60, cwd=repo_root(),
                            env={"PYTHONPATH": str(repo_root()), "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                                 "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"first": True, "remembered": True,
                                                                  "during_outage": [True] * 3}
