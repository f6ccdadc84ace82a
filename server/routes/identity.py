"""Identity routes: who the caller is, the users of their organization, and (administrators) new users,
groups and group members."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from berth.contracts import GroupRequest, GroupView, MemberRequest, UserRequest, UserView
from berth.contracts.base import NAME_PATTERN
from berth.errors import UserInputError
from server.context import Context
from server.guards import Admin, Caller
from server.refusals import refusals
from server.views import user_json

router = APIRouter(responses=refusals(409))  # a user or group that exists already
NAME = re.compile(NAME_PATTERN)


def _check_name(kind: str, name: str) -> str:
    if not NAME.fullmatch(name):  # never a trailing newline, as the schema's pattern
        raise UserInputError(f"{kind} name '{name}' must be letters, digits, '.', '_' or '-' (at most 128).")
    return name


@router.get("/v1/whoami", response_model=UserView)
async def whoami(who: Caller) -> dict[str, Any]:
    return user_json(who)


@router.post("/v1/users", status_code=201, response_model=UserView)
async def create_user(body: UserRequest, context: Context, _who: Admin) -> dict[str, Any]:
    _check_name("User", body.name)
    _check_name("Organization", body.org)
    groups = [_check_name("Group", g) for g in body.groups]
    identity = await run_in_threadpool(context.store.create_user, body.name, body.org, groups, body.admin)
    return user_json(identity)


@router.get("/v1/users", response_model=list[UserView])
async def list_users(context: Context, who: Caller) -> list[dict[str, Any]]:
    users = await run_in_threadpool(context.store.users)
    return [user_json(u) for u in users if who.admin or u.org == who.org]


@router.post("/v1/groups", status_code=201, response_model=GroupView)
async def create_group(body: GroupRequest, context: Context, _who: Admin) -> dict[str, Any]:
    await run_in_threadpool(context.store.create_group, _check_name("Group", body.name),
                            _check_name("Organization", body.org))
    return {"name": body.name, "org": body.org}


@router.post("/v1/groups/{group}/members", status_code=201, response_model=UserView)
async def add_member(group: str, body: MemberRequest, context: Context, _who: Admin) -> dict[str, Any]:
    return user_json(await run_in_threadpool(context.store.add_member, group, body.user))
