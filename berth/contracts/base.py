"""The bases every contract derives from, and `wire()`: a response model back as the JSON it came in."""

from __future__ import annotations

import types
from functools import cache
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    Strict,
    StrictFloat,
    StrictInt,
    WithJsonSchema,
    model_serializer,
    model_validator,
)

# A JSON number read back as it was sent: a bare `float` field would turn the 80 an agent reported into
# 80.0, and `-o json` would print other bytes than the API sent.
Number = int | float
# A number at least 0, the bound stated on each member: on `Number` itself pydantic writes an `ge` JSON Schema does
# not know, and the document would call a negative value valid.
NonNegativeNumber = Annotated[int, Field(ge=0)] | Annotated[float, Field(ge=0)]
# Bounds of integers a store column keeps: a larger value is refused in one line (422) instead of failing the insert
# (500). A count (a BIGINT column) stops at JSON's largest safe integer, 2**53 - 1: past it JSON readers and schema
# validators compare as doubles, and 2**63 - 1 itself reads as 2**63. An INTEGER column (PostgreSQL: 32 bits), such
# as a revision or a process id, at 2**31 - 1.
INT64_MAX = 2**53 - 1
INT32_MAX = 2**31 - 1



def _whole(value: float) -> int:
    if not value.is_integer():
        raise ValueError("must be a whole number")
    return int(value)


def json_int(ge: int, le: int) -> Any:
    """An integer field as JSON Schema reads one (714 and 714.0 alike, never `true`), checked by pydantic-core alone:
    a field of this type needs no Python check (JsonScalars) per instance. For bulk bodies, where that check was most
    of the API's work (an audit batch: docs/performance.md)."""
    return Annotated[Annotated[StrictInt, Field(ge=ge, le=le)]
                     | Annotated[StrictFloat, Field(ge=ge, le=le), AfterValidator(_whole)],
                     WithJsonSchema({"type": "integer", "minimum": ge, "maximum": le})]


def json_float(ge: float, le: float | None = None) -> Any:
    """A number field (an integer too), never `true`, finite, checked by pydantic-core alone (see json_int)."""
    return Annotated[float, Strict(), Field(ge=ge, le=le, allow_inf_nan=False)]

# Constraints a server module checks itself, with its own one-line message and status (400), stated here so that
# /openapi.json states them too: a field declares them with `json_schema_extra` (the schema says it; the check and
# its message stay where they were). The server modules compile these same patterns.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"  # a user, group or organization name
SECRET_REF_PATTERN = r"^secret://(user|group|organization)/([A-Za-z0-9][A-Za-z0-9._-]{0,127})$"
DURATION_PATTERN = r"^\s*[0-9]{1,9}[smhdw]\s*$"  # berth/tokens.parse_duration: 30m, 8h, 7d
SECRET_TYPES = ("hf", "value")


class JsonScalars(BaseModel):
    """A model that refuses `true`/`false` for a number and a number for a boolean, as its JSON schema says: pydantic
    would read `false` as 0 and `1` as true, and a request the document calls invalid would be served."""

    @model_validator(mode="before")
    @classmethod
    def _json_scalars(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, (kind, many) in _scalar_fields(cls).items():
                value = data.get(key)
                values = value if many and isinstance(value, list | tuple) else () if many else (value,)
                for item in values:
                    if kind is bool and isinstance(item, int | float) and not isinstance(item, bool):
                        raise ValueError(f"{key} holds true or false, not a number")
                    if kind is float and isinstance(item, bool):
                        raise ValueError(f"{key} holds numbers, not true or false")
        return data


def _scalar_kind(annotation: Any) -> type | None:
    """bool for a boolean, float for a number (int, float or both), optional or not; else None."""
    options = get_args(annotation) if get_origin(annotation) in (Union, types.UnionType) else (annotation,)
    present = {get_args(option)[0] if get_origin(option) is Annotated else option
               for option in options if option is not type(None)}
    return bool if present == {bool} else float if present and present <= {int, float} else None


@cache
def _scalar_fields(model: type[BaseModel]) -> dict[str, tuple[type, bool]]:
    """Each input name of `model`'s boolean and number fields (and lists or tuples of them: many) → (bool or float,
    many)."""
    kinds: dict[str, tuple[type, bool]] = {}
    for name, field in model.model_fields.items():
        annotation = field.annotation
        kind, many = _scalar_kind(annotation), False
        if kind is None and get_origin(annotation) in (list, tuple):
            items = [item for item in get_args(annotation) if item is not Ellipsis]
            kinds_of_items = {_scalar_kind(item) for item in items}
            kind, many = (kinds_of_items.pop(), True) if len(kinds_of_items) == 1 else (None, False)
        if kind is None:
            continue
        alias = field.validation_alias
        names = [choice for choice in alias.choices if isinstance(choice, str)] if isinstance(alias, AliasChoices) \
            else [alias] if isinstance(alias, str) else [field.alias or name]
        kinds.update(dict.fromkeys(names, (kind, many)))
    return kinds


class Payload(JsonScalars):
    """A request or Temporal payload (workflows/payloads.py derives from it too)."""

    model_config = ConfigDict(frozen=True)


class Response(BaseModel):
    """A route's answer. `model_id` and friends are wire names: pydantic's `model_` namespace is freed."""

    model_config = ConfigDict(frozen=True, protected_namespaces=())


class Refusal(Response):
    """The API's one error shape, for every refusal it makes (server/app.py maps each Berth error; a request
    FastAPI cannot validate answers 422 in it too): `detail`, one line that never quotes the caller's input
    whole, and `code`, a machine-readable word for the kind of refusal (berth/errors.py), absent where the
    refusal is made before Berth's code runs (an oversized body, an unknown path). Every route declares it
    in /openapi.json for every status it may refuse with (server/refusals.py)."""

    detail: str
    code: str | None = None


class OpenResponse(Response):
    """An answer part that is open by nature (a node's GPU facts, a model's facts, a heartbeat detail):
    the fields Berth reads are typed, the rest are kept as they came."""

    model_config = ConfigDict(frozen=True, protected_namespaces=(), extra="allow")


def wire(value: Any) -> Any:
    """A response model (or a list of them) as the JSON the API sent: the fields it sent, by their wire
    names. Routes answer with `response_model_exclude_unset`, so a field the server left out stays out."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", by_alias=True, exclude_unset=True)
    if isinstance(value, list | tuple):
        return [wire(item) for item in value]
    return value


class Renamed(BaseModel):
    """A model with fields renamed this release: each is declared `Field(validation_alias=AliasChoices(new,
    old))`, is read under either name, and is emitted under both, the old name after the rest, while a
    caller of the previous release may still read it (docs/architecture.md lists them). A field left out
    (`exclude_unset`) stays out under both names."""

    # No return annotation on purpose: pydantic would take it for the serialized schema, and /openapi.json
    # would lose each model's fields.
    @model_serializer(mode="wrap")
    def _emit_old_names(self, handler: SerializerFunctionWrapHandler):  # type: ignore[no-untyped-def]
        data = handler(self)
        if isinstance(data, dict):
            for name, old in old_names(type(self)).items():
                if name in data:
                    data[old] = data[name]
        return data


@cache
def old_names(model: type[BaseModel]) -> dict[str, str]:
    """new field name → its old name, for the fields of `model` read under two names."""
    renamed = {}
    for name, field in model.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, AliasChoices) and len(alias.choices) == 2 and alias.choices[0] == name:
            old = alias.choices[1]
            if isinstance(old, str):
                renamed[name] = old
    return renamed


def formerly(old: str, name: str, default: Any = ..., **kwargs: Any) -> Any:
    """A field named `name`, called `old` until this release (see Renamed)."""
    return Field(default, validation_alias=AliasChoices(name, old), **kwargs)
