"""What a console form sent, as the typed request its API route takes: the text fields as typed (kept for the
re-rendered form), blanks left to the route's defaults, and a value the request model refuses turned into
the one-line UserInputError a page shows beside its form — the same words for every page group."""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from berth.errors import UserInputError, shown

M = TypeVar("M", bound=BaseModel)


async def form_text(request: Request) -> dict[str, str]:
    """The form's text fields (a file upload is never one of ours, so it is left out)."""
    return {key: value for key, value in (await request.form()).items() if isinstance(value, str)}


def given(form: dict[str, str], *names: str) -> dict[str, str]:
    """The named fields the user filled in, stripped; an empty one is left to the route's default."""
    return {name: form[name].strip() for name in names if form.get(name, "").strip()}


def lines(text: str) -> list[str]:
    """A textarea of one value per line (or comma-separated) as a list."""
    return [part.strip() for part in text.replace(",", "\n").splitlines() if part.strip()]


def validated(model: type[M], data: dict[str, Any], labels: dict[str, str] | None = None) -> M:
    """`data` as `model`, or a UserInputError naming the first field at fault by its form label."""
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        label = (labels or {}).get(field, field.replace("_", " ") or "The form")
        value = f" ({shown(first['input'], 40)})" if field and isinstance(first.get("input"), str) else ""
        message = str(first["msg"]).removeprefix("Value error, ")
        raise UserInputError(f"{label}{value}: {message}.") from None
