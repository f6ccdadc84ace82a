"""Model registry pages: the models the user may use with their jobs (refreshed in place every 3 s), the
register form (what `berth model add` takes), and one model's status with its materialize, verify and
remove buttons. Every refusal is the API's own line, shown beside the form or button that caused it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import Response

from berth.contracts import ModelCreate, ModelFormat, ModelRecord, ModelScope, ModelState, UserView
from berth.errors import BerthError
from berth.units import binary_size as size
from console.pages.form_values import form_text, given, lines, validated
from console.render import page, redirect
from console.routing import ConsoleRoute
from console.session import CsrfChecked, Session, Signed

router = APIRouter(prefix="/ui", route_class=ConsoleRoute, include_in_schema=False)

# The register form's fields as ModelCreate names them, and the labels a refusal names them by.
LABELS = {"name": "Name", "source": "Source", "scope": "Scope", "group": "Group", "signature": "Signature",
          "license": "License", "residency": "Residency", "format": "Format",
          "hf_token_secret": "Hugging Face token secret", "allow_patterns": "Include", "ignore_patterns": "Exclude",
          "require_checksum": "Require checksum"}
TEXT_FIELDS = ("name", "source", "scope", "group", "signature", "license", "residency", "format", "hf_token_secret")



def model_path(name: str) -> str:
    return f"/ui/models/{quote(name, safe='')}"


def percent(done: int, total: int) -> int:
    return min(100, done * 100 // total) if total else 0


def may_remove(record: ModelRecord, user: UserView) -> bool:
    """Whether the remove button is offered: the API lets only the owner or an administrator remove."""
    return user.admin or record.owner == user.name


def actions(record: ModelRecord, user: UserView) -> list[str]:
    """The buttons a model's page offers now; a running job is joined, so none starts while one runs."""
    if record.state in ModelState.working():
        return []
    offered = ["materialize"]
    if record.digest is not None:
        offered.append("verify")
    if may_remove(record, user):
        offered.append("remove")
    return offered


def _helpers() -> dict[str, Any]:
    return {"size": size, "percent": percent, "scopes": [s.value for s in ModelScope],
            "formats": [f.value for f in ModelFormat]}


async def _models_page(request: Request, session: Session, status_code: int = 200, values: dict[str, str] | None = None,
                       error: str | None = None) -> Response:
    models = await session.api.models()
    jobs = await session.api.model_jobs()
    return page(request, session, "models.html", status_code, models=models, jobs=jobs, values=values or {},
                error=error, **_helpers())


@router.get("/models")
async def models(request: Request, session: Signed) -> Response:
    return await _models_page(request, session)


@router.get("/model-jobs/live")
async def jobs_live(request: Request, session: Signed) -> Response:
    """The jobs table alone, for htmx to swap in (a fixed path: never taken for a model's name)."""
    jobs = await session.api.model_jobs()
    return page(request, session, "fragments/model_jobs.html", jobs=jobs, **_helpers())


def creation(form: dict[str, str]) -> ModelCreate:
    """The register form as POST /v1/models takes it: blanks left to the API's defaults."""
    data: dict[str, Any] = given(form, *TEXT_FIELDS)
    data["require_checksum"] = form.get("require_checksum") == "on"
    for field, text in (("allow_patterns", form.get("include", "")), ("ignore_patterns", form.get("exclude", ""))):
        if lines(text):
            data[field] = lines(text)
    return validated(ModelCreate, data, LABELS)


@router.post("/models", dependencies=[CsrfChecked])
async def register(request: Request, session: Signed) -> Response:
    form = await form_text(request)
    try:
        record = await session.api.add_model(creation(form))
    except BerthError as error:
        return await _models_page(request, session, error.http_status, values=form, error=str(error))
    return redirect(model_path(record.name))


async def _model_page(request: Request, session: Session, name: str, status_code: int = 200,
                      error: str | None = None) -> Response:
    record = await session.api.model_status(name)
    return page(request, session, "model.html", status_code, model=record, offered=actions(record, session.user),
                error=error, **_helpers())


@router.get("/models/{name}")
async def model(request: Request, session: Signed, name: str) -> Response:
    return await _model_page(request, session, name)


@router.get("/models/{name}/live")
async def model_live(request: Request, session: Signed, name: str) -> Response:
    record = await session.api.model_status(name)
    return page(request, session, "fragments/model_status.html", model=record, offered=actions(record, session.user),
                **_helpers())


@router.post("/models/{name}/materialize", dependencies=[CsrfChecked])
async def materialize(request: Request, session: Signed, name: str) -> Response:
    try:
        await session.api.materialize_model(name)
    except BerthError as error:
        return await _model_page(request, session, name, error.http_status, error=str(error))
    return redirect(model_path(name))


@router.post("/models/{name}/verify", dependencies=[CsrfChecked])
async def verify(request: Request, session: Signed, name: str) -> Response:
    try:
        await session.api.verify_model(name)
    except BerthError as error:
        return await _model_page(request, session, name, error.http_status, error=str(error))
    return redirect(model_path(name))


@router.post("/models/{name}/remove", dependencies=[CsrfChecked])
async def remove(request: Request, session: Signed, name: str) -> Response:
    try:
        await session.api.remove_model(name)
    except BerthError as error:
        return await _model_page(request, session, name, error.http_status, error=str(error))
    return redirect("/ui/models")
