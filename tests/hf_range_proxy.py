"""A range-honouring, counting reverse proxy in front of olah (whose local mirrors ignore `Range`): the
model fetch's resume tests and the model jobs' end-to-end tests put it between the downloader and the
mirror, and read how many file bytes it served (per repository), optionally over a slow link."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx


class RangeProxy:
    """Forwards to olah; answers a `Range: bytes=N-` on /resolve/ with 206 and counts the body bytes sent."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.served = 0
        self.served_by_repo: dict[str, int] = {}  # "org/name" → file bytes served
        self.delay_s = 0.0  # a pause after each 256 KiB piece: a slow link, so a download can be caught midway
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - the http.server naming
                proxy.answer(self)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        # Redirects followed here (olah redirects some API paths), the answer's type passed on (the API's JSON).
        upstream = httpx.get(self.upstream + handler.path, timeout=60, follow_redirects=True,
                             headers={k: v for k, v in handler.headers.items() if k.lower() == "authorization"})
        body = upstream.content
        wanted = handler.headers.get("Range", "")
        start = int(wanted.removeprefix("bytes=").split("-")[0]) if wanted.startswith("bytes=") else 0
        if start >= len(body) and start:
            handler.send_response(416)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        handler.send_response(206 if start else upstream.status_code)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        for name in ("Content-Type", "ETag", "X-Repo-Commit", "X-Linked-Etag", "X-Linked-Size"):
            if name in upstream.headers:
                handler.send_header(name, upstream.headers[name])
        handler.send_header("Content-Length", str(len(body) - start))
        handler.end_headers()
        view = memoryview(body)[start:]
        for offset in range(0, len(view), 256 * 1024):
            piece = view[offset : offset + 256 * 1024]
            handler.wfile.write(piece)
            if "/resolve/" in handler.path:
                repo = "/".join(handler.path.lstrip("/").split("/")[:2])
                with self.lock:
                    self.served += len(piece)
                    self.served_by_repo[repo] = self.served_by_repo.get(repo, 0) + len(piece)
            if self.delay_s:
                time.sleep(self.delay_s)

    def start(self) -> RangeProxy:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
