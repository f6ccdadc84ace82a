"""The API's refusals in /openapi.json: every route declares each status it may refuse with, all in the one error
shape (berth.contracts.Refusal: `detail`, one line, and a machine-readable `code`), so that a client generated
from the document reads every answer the server sends.

What a route's shape says it may refuse with is declared here, once, for every route (`declare_refusals`): a path
ID outside the ID grammar (400, server/request_limits.py), a body too large (413) or nested too deep (400), a
request FastAPI cannot validate (422), no or a bad token (401), a caller who may not (403), and an ID, body or
query naming nothing the caller may see (404; a value the route refuses: 400). What only some routes do (a name
taken: 409; Temporal or a job runner unreachable: 503) each router declares with
`refusals(...)`. The path IDs' grammar is stated in the schema here too: one app-wide dependency enforces it for
every path parameter."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.routing import iter_route_contexts
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from berth.contracts import Refusal

Responses = dict[int | str, dict[str, Any]]

# Why each status is answered; a route's own description (server/routes/endpoint_tokens.py) is kept over these.
WHY = {
    400: "A value that is not one: a path ID outside the ID grammar, a body nested too deep, a value the "
         "route refuses",
    401: "No API token, or an expired, revoked or foreign one",
    403: "The caller may not do this (not an administrator, not the owner, outside the scope)",
    404: "Nothing with this ID or name that the caller may see",
    409: "The name is taken, or the thing is in use",
    413: "The request body is larger than the cluster accepts (max_request_body_bytes)",
    422: "The request does not match this document (a missing, mistyped or out-of-range field), or asks for "
         "more than the cluster can hold",
    503: "Temporal, the control worker or a node it needs is unreachable now, or the API is busy checking other "
         "submissions; try again",
}

# The ID grammar server/request_limits.ID enforces (1 to 128 of letters, digits, '.', '_', '-', a letter or digit
# first, never '..'), in a form JSON Schema validators and generators read alike (no look-ahead).
PATH_ID_PATTERN = r"^[A-Za-z0-9](\.?[A-Za-z0-9_-])*\.?$"
PATH_ID_MAX_LENGTH = 128


def refusals(*statuses: int) -> Responses:
    """`responses=` for a route or router that may refuse with each of `statuses`."""
    return {status: {"model": Refusal, "description": WHY[status]} for status in statuses}


REFUSAL = {"application/json": {"schema": {"$ref": "#/components/schemas/Refusal"}}}


# An API token, a service's or a gateway's token (berth/security.py), as `Authorization: Bearer …`.
BEARER = {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}


def _is_authorization(parameter: dict[str, Any]) -> bool:
    return bool(parameter["in"] == "header" and parameter["name"].lower() == "authorization")


def _statuses(operation: dict[str, Any]) -> list[int]:
    """What an operation's shape says it may refuse with."""
    where = {parameter["in"] for parameter in operation.get("parameters", ())}
    authenticated = any(_is_authorization(parameter) for parameter in operation.get("parameters", ()))
    body = "requestBody" in operation
    statuses = []
    if body or where & {"path", "query"}:
        statuses += [400, 404, 422]  # 422: a path value, query value or body FastAPI cannot read as declared
    if authenticated:
        statuses += [401, 403]
    if body:
        statuses.append(413)
    return statuses


def install(app: FastAPI) -> None:
    """Declare the refusals in the app's document, and answer a method a path does not serve with every method it
    does serve in `Allow` (Starlette names only those of the first route of the path)."""
    declare_refusals(app)

    @app.exception_handler(405)
    async def _method_not_allowed(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"detail": error.detail}, status_code=405,
                            headers={"Allow": ", ".join(_served_methods(app, request))})


def _served_methods(app: FastAPI, request: Request) -> list[str]:
    """The methods the document gives the request's path: those of its most specific template (`/v1/models/use`
    over `/v1/models/{name}`), as a client reading the document resolves it."""
    matching = [route for route in iter_route_contexts(app.routes)
                if route.path_format and route.matches(request.scope)[0] is not Match.NONE]
    if not matching:
        return []
    specific = min(matching, key=lambda route: str(route.path_format).count("{")).path_format
    return sorted({method for route in matching if route.path_format == specific for method in route.methods or ()})


def declare_refusals(app: FastAPI) -> None:
    """/openapi.json as the contract: each operation declares the refusals its shape implies (its own declarations
    kept), 422 in the same shape as every other refusal (FastAPI's default names a list of errors the app never
    sends: request_limits answers one line), and the path IDs' grammar. The routers are shared by every app, so
    the document is amended rather than their routes."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _amend(build())
        return build()

    app.openapi = openapi  # type: ignore[method-assign]


def _amend(schema: dict[str, Any]) -> None:
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    schema["components"]["securitySchemes"] = {"bearer": BEARER}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            answers = operation.setdefault("responses", {})
            parameters = operation.get("parameters", [])
            if "HTTPValidationError" in str(answers.get("422", "")):
                del answers["422"]
            for status in _statuses(operation):
                answers.setdefault(str(status), {"description": WHY[status], "content": REFUSAL})
            for parameter in parameters:
                if parameter["in"] == "path" and parameter["schema"].get("type") == "integer":
                    parameter["schema"].update(minimum=0)  # an ID is digits only: never a sign
                elif parameter["in"] == "path":
                    parameter["schema"].update(pattern=PATH_ID_PATTERN, maxLength=PATH_ID_MAX_LENGTH)
            # The guards read the Authorization header themselves (server/guards.py); the document states it as
            # what it is, a bearer token, so that clients and fuzzers send one rather than any string.
            if any(_is_authorization(parameter) for parameter in parameters):
                operation["parameters"] = [parameter for parameter in parameters if not _is_authorization(parameter)]
                operation["security"] = [{"bearer": []}]
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    components.setdefault("Refusal", Refusal.model_json_schema())
