"""Secret answers: never a value, save the internal resolve route the control worker calls."""

from __future__ import annotations

from pydantic import Field
from pydantic.config import JsonDict

from berth.contracts.base import SECRET_REF_PATTERN, SECRET_TYPES, Payload, Response

_REF: JsonDict = {"pattern": SECRET_REF_PATTERN}  # checked by server/secrets.py, 400 in one line


class SecretCreated(Response):
    ref: str
    type: str
    scope: str
    owner: str


class SecretView(Response):
    ref: str
    type: str
    scope: str
    owner: str
    created_at: float
    created_by: str | None = None  # None on secrets made before Berth recorded it


class ResolvedSecret(Response):
    type: str
    value: str = Field(repr=False)


# --- requests ------------------------------------------------------------------------------------------
class SecretRequest(Payload):
    ref: str = Field(json_schema_extra=_REF)
    type: str = Field(json_schema_extra={"enum": list(SECRET_TYPES)})
    value: str = Field(repr=False)
    group: str | None = None


class ResolveRequest(Payload):
    ref: str = Field(json_schema_extra=_REF)
    user: str
