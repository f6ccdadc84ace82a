"""Who is inside an endpoint's scope: the one rule the control plane and the endpoint proxy both apply."""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from berth.security import Identity


class Scope(StrEnum):
    """Who may call an endpoint."""

    USER = "user"  # the owner only
    GROUP = "group"  # members of the owner's groups
    ORGANIZATION = "organization"  # anyone in the owner's organization
    PUBLIC = "public"  # everyone; the proxy lets every request through


def in_scope(scope: Scope | str, owner: str, org: str, groups: Iterable[str], who: Identity) -> bool:
    """Whether `who` may call an endpoint of this scope: its owner always; then by group, organization
    or everyone. Administrators are not let in here: each caller says where an administrator may pass."""
    scope = Scope(scope)
    if who.user == owner or scope is Scope.PUBLIC:
        return True
    if scope is Scope.GROUP:
        return bool(set(who.groups) & set(groups))
    if scope is Scope.ORGANIZATION:
        return who.org == org
    return False
