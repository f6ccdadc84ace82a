"""Secrets: typed values encrypted at rest, addressed as secret://user|group|organization/NAME and
resolved only for the activity that uses them."""

from __future__ import annotations

import re
import time
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from berth.bounded_parse import TooDeep, load_json
from berth.contracts.base import SECRET_REF_PATTERN, SECRET_TYPES
from berth.errors import NotFoundError, PermissionDeniedError, UserInputError
from berth.security import Identity
from catalog.entry import Entry, ParameterType
from server.store.database import Store
from server.store.tables import SecretRow

REFERENCE = re.compile(SECRET_REF_PATTERN)
TYPES = SECRET_TYPES


def parse_reference(ref: str) -> tuple[str, str]:
    match = REFERENCE.fullmatch(ref)  # never a trailing newline, as the schema's pattern
    if not match:
        raise UserInputError(f"'{ref}' is not a secret reference; use secret://user/NAME "
                             "(or secret://group/NAME, secret://organization/NAME).")
    return match.group(1), match.group(2)


# How widely each scope reaches: a secret must reach at least as far as whatever uses it.
SCOPE_WIDTH = {"user": 0, "group": 1, "organization": 2}


def check_covers(ref: str, scope: str, what: str) -> None:
    """Refuse (one line) a secret narrower than the `scope`-wide `what` that uses it (issue 29): an
    organization's model carrying one user's HF token would spend that user's token on every member's
    download."""
    secret_scope, _name = parse_reference(ref)
    if SCOPE_WIDTH[secret_scope] < SCOPE_WIDTH[scope]:
        raise UserInputError(f"A {scope} {what} cannot use {ref}: a {secret_scope} secret is narrower than the "
                             f"{what}, whose every member would use it; reference a secret://{scope}/NAME instead.")


def owner_key(scope: str, who: Identity, group: str | None = None, what: str = "secret") -> str:
    """The user, group or organization a name of `scope` belongs to (secrets' and models' alike)."""
    if scope == "user":
        return who.user
    if scope == "organization":
        return who.org
    if group is None:
        if not who.groups:
            raise PermissionDeniedError(f"You belong to no group, so you cannot use a group {what}.")
        group = who.groups[0]
    if group not in who.groups:
        raise PermissionDeniedError(f"You are not a member of group '{group}'.")
    return group


def validate_value(kind: str, value: str) -> str:
    if kind not in TYPES:
        raise UserInputError(f"Secret type must be one of {', '.join(TYPES)}, not '{kind}'.")
    if kind == "hf":
        try:
            data = load_json(value, "An hf secret")
        except TooDeep:
            raise
        except ValueError:
            raise UserInputError('An hf secret is JSON like \'{"token":"hf_…"}\'.') from None
        if not isinstance(data, dict) or not isinstance(data.get("token"), str) or not data["token"]:
            raise UserInputError('An hf secret needs a "token" string: \'{"token":"hf_…"}\'.')
    elif not value:
        raise UserInputError("A value secret cannot be empty; pass the value on standard input.")
    return value


def _may_change(row: SecretRow, who: Identity, ref: str) -> None:
    """A shared (group/organization) secret is changed or deleted by its creator or an administrator
    only: another member could otherwise swap the value every workflow using it resolves. A row from
    before Berth recorded creators is an administrator's to change."""
    if row.scope == "user" or who.admin or (row.created_by is not None and row.created_by == who.user):
        return
    made = f"was created by {row.created_by}" if row.created_by else "has no recorded creator (it is older)"
    raise PermissionDeniedError(f"{ref} {made}: only its creator or an administrator may change or delete it. "
                                "Create your own under another name.")


class Secrets:
    def __init__(self, store: Store) -> None:
        self.store = store

    def create(self, who: Identity, ref: str, kind: str, value: str, group: str | None = None) -> dict[str, Any]:
        scope, name = parse_reference(ref)
        owner = owner_key(scope, who, group)
        validate_value(kind, value)
        key = f"{scope}/{owner}/{name}"
        with self.store.session() as s:
            row = s.get(SecretRow, key)
            if row is None:
                row = SecretRow(ref=key, scope=scope, owner=owner, name=name, type=kind, ciphertext="",
                                created_at=time.time(), created_by=who.user)
                s.add(row)
            else:
                _may_change(row, who, ref)
                row.created_by = row.created_by or who.user  # an administrator adopts an unattributed one
            row.type = kind
            row.ciphertext = self.store.cipher.encrypt_json({"value": value})
        return {"ref": ref, "type": kind, "scope": scope, "owner": owner}

    def list(self, who: Identity) -> list[dict[str, Any]]:
        owners = {("user", who.user), ("organization", who.org)} | {("group", g) for g in who.groups}
        with self.store.session() as s:
            rows = s.scalars(select(SecretRow).order_by(SecretRow.name)).all()
            return [{"ref": f"secret://{r.scope}/{r.name}", "type": r.type, "scope": r.scope, "owner": r.owner,
                     "created_at": r.created_at, "created_by": r.created_by}
                    for r in rows if (r.scope, r.owner) in owners]

    def delete(self, who: Identity, ref: str) -> None:
        scope, name = parse_reference(ref)
        key = f"{scope}/{owner_key(scope, who)}/{name}"
        with self.store.session() as s:
            row = s.get(SecretRow, key)
            if row is None:
                raise NotFoundError(f"No secret {ref}. `berth secret list` shows yours.")
            _may_change(row, who, ref)
            s.delete(row)

    def resolve(self, owner: Identity, ref: str) -> tuple[str, str]:
        """(type, value) of `ref` as seen by `owner`; for group secrets, the first group that has it."""
        with self.store.session() as s:
            row = _visible_row(s, owner, ref)
            if row is not None:
                return row.type, str(self.store.cipher.decrypt_json(row.ciphertext)["value"])
        raise NotFoundError(f"Secret {ref} does not exist for {owner.user}. Create it with "
                            f"`berth secret create {ref} --type …`.")

    def kind(self, owner: Identity, ref: str) -> str | None:
        """The type of the secret `ref` resolves to for `owner`, or None when it resolves to none; the
        value is not decrypted (a submission is checked with this, and needs no value)."""
        with self.store.session() as s:
            row = _visible_row(s, owner, ref)
            return None if row is None else row.type


def _visible_row(session: Session, owner: Identity, ref: str) -> SecretRow | None:
    """The row `ref` names for `owner`, by the resolution rules: their own (user), their organization's,
    or the first of their groups that has one."""
    scope, name = parse_reference(ref)
    candidates = [owner.user] if scope == "user" else [owner.org] if scope == "organization" else list(owner.groups)
    for candidate in candidates:
        row = session.get(SecretRow, f"{scope}/{candidate}/{name}")
        if row is not None:
            return row
    return None


_CREATE = {"value": "`printf 'sk-…' | berth secret create {ref} --type value`",
           "hf": "`berth secret create {ref} --type hf '{{\"token\":\"hf_…\"}}'`"}


def check_references(secrets: Secrets, owner: Identity, entry: Entry, values: dict[str, Any]) -> None:
    """Refuse at submission a secret reference the workflow could not resolve when it runs: one its owner
    has no secret under, or one of the wrong type. Otherwise the workflow starts, holds its GPUs, and
    fails only when a node asks for the value. It is resolved again where it is used (it may be deleted
    in between); this check is what makes the common mistake a one-line refusal."""
    for parameter in entry.parameters:
        ref = values.get(parameter.name)
        if parameter.type is not ParameterType.SECRET or not ref:
            continue
        wanted = parameter.secret_type
        create = _CREATE[wanted].format(ref=ref) if wanted else f"`berth secret create {ref} --type …`"
        kind = secrets.kind(owner, ref)
        if kind is None:
            raise UserInputError(f"{parameter.name}={ref}: no such secret for {owner.user}. Create it with "
                                 f"{create}, or name one `berth secret list` shows.")
        if wanted is not None and kind != wanted:
            raise UserInputError(f"{parameter.name}={ref} is a '{kind}' secret; it must be of type {wanted}. "
                                 f"Replace it with {create}.")
