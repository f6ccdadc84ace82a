"""Identity answers (a user: whoami, the user list, a new user or member; a new group) and requests."""

from __future__ import annotations

from pydantic import Field
from pydantic.config import JsonDict

from berth.contracts.base import NAME_PATTERN, Payload, Response

_NAME: JsonDict = {"pattern": NAME_PATTERN}  # checked by server/routes/identity.py, 400 in one line


class UserView(Response):
    name: str
    org: str
    groups: list[str]
    admin: bool


class GroupView(Response):
    name: str
    org: str


# --- requests ------------------------------------------------------------------------------------------
class UserRequest(Payload):
    name: str = Field(json_schema_extra=_NAME)
    org: str = Field("default", json_schema_extra=_NAME)
    groups: list[str] = Field([], json_schema_extra={"items": {"type": "string", **_NAME}})
    admin: bool = False


class GroupRequest(Payload):
    name: str = Field(json_schema_extra=_NAME)
    org: str = Field("default", json_schema_extra=_NAME)


class MemberRequest(Payload):
    user: str
