"""Identity answers (a user: whoami, the user list, a new user or member; a new group) and requests."""

from __future__ import annotations

from berth.contracts.base import Payload, Response


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
    name: str
    org: str = "default"
    groups: list[str] = []
    admin: bool = False


class GroupRequest(Payload):
    name: str
    org: str = "default"


class MemberRequest(Payload):
    user: str
