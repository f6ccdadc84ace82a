"""Identity answers: a user (whoami, the user list, a new user or member) and a new group."""

from __future__ import annotations

from berth.contracts.base import Response


class UserView(Response):
    name: str
    org: str
    groups: list[str]
    admin: bool


class GroupView(Response):
    name: str
    org: str
