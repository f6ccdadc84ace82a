"""Issue 11, item 6: the endpoint proxy forwards no Berth credential to a model service, whatever its
audience — a user's API token, a token for another endpoint, the `berth_token` cookie — in any header
(Authorization, x-api-key, x-litellm-api-key), while the caller's other cookies and keys still pass.

The model service here is a loopback server that records the headers it receives, published as the
only routable copy of a real pool (its own copies drained), so requests go through the real proxy."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.security.conftest import People
from tests.support import wait_for


@dataclass
class Recorder:
    """What the model service saw: each request's path and headers."""

    url: str
    seen: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)


def _handler(recorder: Recorder) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            if length:
                self.rfile.read(length)
            if self.path.endswith("/chat/completions"):  # not the proxy's own /metrics scrapes
                recorder.seen.append((self.path, list(self.headers.items())))
            body = b"" if self.path == "/metrics" else json.dumps({"ok": True}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: object) -> None:
            return

    return Handler


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    holder = Recorder(url="")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(holder))
    holder.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield holder
    finally:
        server.shutdown()
        server.server_close()


def _pool(people: People) -> tuple[str, str]:
    """(workflow id, endpoint id) of an admin's group-scoped pool whose copies are drained: the proxy
    routes to none of them, and a pool that may scale to zero is never woken for them."""
    workflow_id = people.stack.start_entry(
        "vLLM", "Model=hf://Qwen/Qwen3-0.6B,GpusPerNode=1,Proxy=false,MinReplicas=0,Scope=group")
    endpoint_id = people.stack.endpoint(workflow_id)["id"]
    for replica in people.api("admin", "GET", f"/v1/endpoints/{endpoint_id}").json()["replicas"]:
        assert people.api("admin", "POST", f"/v1/internal/replicas/{replica['copy_id']}/drain").status_code == 204
    return workflow_id, endpoint_id


def test_no_berth_credential_reaches_the_model_service(people: People, recorder: Recorder) -> None:
    workflow_id, endpoint_id = _pool(people)
    other_workflow, other_endpoint = _pool(people)
    try:
        # Standing in for a copy: it holds a placement (a copy without one publishes nothing), then publishes.
        placed = people.api("admin", "POST", "/v1/internal/reservations",
                            json={"workflow_id": workflow_id, "copy_id": f"{workflow_id}.echo", "nodes": 1,
                                  "gpus_per_node": 1})
        assert placed.status_code == 200 and placed.json()["placement"], placed.text
        published = people.api("admin", "PUT", f"/v1/internal/replicas/{workflow_id}.echo",
                               json={"workflow_id": workflow_id, "endpoint_id": endpoint_id,
                                     "copy_id": f"{workflow_id}.echo", "url": recorder.url, "ready": True})
        assert published.status_code == 204, published.text
        mint = people.api("bob", "POST", f"/v1/endpoints/{endpoint_id}/tokens", json={"expiration": "1h"})
        endpoint_token = mint.json()["token"]
        other_token = people.api("bob", "POST", f"/v1/endpoints/{other_endpoint}/tokens",
                                 json={"expiration": "1h"}).json()["token"]
        api_token = people.tokens["bob"]
        url = f"{people.stack.info['proxy_url']}/endpoints/{endpoint_id}/v1/chat/completions"
        attempts = [
            # The console cookie identifies; the API token rides in Authorization.
            {"Cookie": f"theme=dark; berth_token={endpoint_token}; lang=en", "Authorization": f"Bearer {api_token}"},
            # The endpoint's token in Authorization; other Berth tokens in the key headers.
            {"Authorization": f"Bearer {endpoint_token}", "x-api-key": other_token,
             "x-litellm-api-key": f"Bearer {api_token}", "Cookie": f"session=abc; stolen={api_token}"},
            # Berth-Authorization identifies; Authorization carries the other endpoint's token.
            {"Berth-Authorization": f"Bearer {endpoint_token}", "Authorization": f"Bearer {other_token}",
             "x-api-key": "sk-the-services-own-key"},
        ]
        for headers in attempts:
            response = wait_for(lambda h=headers: _answered(url, h), 60, "the echo copy to answer")
            assert response.json() == {"ok": True}
        assert len(recorder.seen) == len(attempts)
        received = json.dumps(recorder.seen)
        for token in (endpoint_token, other_token, api_token):
            assert token not in received, "a Berth token reached the model service"
        cookies = [v for _, headers in recorder.seen for k, v in headers if k.lower() == "cookie"]
        assert cookies == ["theme=dark; lang=en", "session=abc"], cookies  # the caller's other cookies pass
        keys = [v for _, headers in recorder.seen for k, v in headers if k.lower() == "x-api-key"]
        assert keys == ["sk-the-services-own-key"], keys
    finally:
        people.api("admin", "DELETE", f"/v1/internal/replicas/{workflow_id}.echo")
        people.api("admin", "DELETE", f"/v1/internal/reservations/{workflow_id}.echo")
        for started in (workflow_id, other_workflow):
            people.cli("admin", "workflow", "stop", started)


def _answered(url: str, headers: dict[str, str]) -> httpx.Response | None:
    """The proxy's answer once it routes to the echo copy (its routing table refreshes every second)."""
    response = httpx.post(url, json={"model": "Qwen/Qwen3-0.6B", "messages": []}, headers=headers, timeout=30)
    assert response.status_code in (200, 503), response.text[:300]
    return response if response.status_code == 200 else None
