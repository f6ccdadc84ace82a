"""The console's route class: an API error a page did not handle becomes an HTML page with the API's one
line (or, for a lapsed session, a trip to sign-in) — never the JSON body the REST API answers with."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from berth.errors import AuthenticationError, BerthError
from console.render import html, redirect

log = logging.getLogger("berth.console")


class ConsoleRoute(APIRoute):
    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except AuthenticationError:
                if request.headers.get("hx-request"):  # a live part: tell htmx to load sign-in as a page
                    return Response(status_code=204, headers={"HX-Redirect": "/ui/signin"})
                # A fixed flag, not the error's words: a sign-in page must not echo text a link can choose.
                return redirect("/ui/signin?lapsed=1" if request.cookies.get("berth_session") else "/ui/signin")
            except BerthError as error:
                return html(request, "error.html", error.http_status, message=str(error))
            except Exception:
                # An API route that crashed under the in-process transport raises here, not in uvicorn:
                # logged with its stack as uvicorn would, answered with one line and no internals.
                log.exception("console page %s failed", request.url.path)
                return html(request, "error.html", 500, message="Berth failed on this request; the API's log "
                                                                "has the details. Retry, or tell an administrator.")

        return route
