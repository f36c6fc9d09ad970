"""Teams (auth groups) and their members, managed by staff from the console: every change audited.

A team owns experts, imported queries and discovery runs (``experts.access``, ``labeling.access``);
who is in it decides what its members see. Only staff change teams.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db import transaction

from audit.services import record

MAX_NAME = 150  # auth.Group.name's max_length


class TeamError(ValueError):
    """A team change that cannot be made, with a message for the person making it."""


def _check_staff(actor: Any) -> None:
    if actor is not None and not getattr(actor, "is_staff", False):
        raise PermissionDenied("Only staff may create teams or change who is in them.")


@transaction.atomic
def create_team(name: str, actor: Any = None, request: Any = None) -> Group:
    """Create a team named ``name`` (whitespace collapsed); audited as ``team.create``.

    Raises:
        PermissionDenied: ``actor`` is not staff (``None``: a script, allowed).
        TeamError: the name is empty, too long, or another team's (case aside).
    """
    _check_staff(actor)
    name = " ".join((name or "").split())
    if not name:
        raise TeamError("a team needs a name")
    if len(name) > MAX_NAME:
        raise TeamError(f"a team's name has at most {MAX_NAME} characters")
    if Group.objects.filter(name__iexact=name).exists():
        raise TeamError(f"a team named {name!r} exists already")
    team = Group.objects.create(name=name)
    record("team.create", actor=actor, obj=team, request=request)
    return team


def _member(username: str) -> Any:
    user = get_user_model().objects.filter(username=(username or "").strip()).first()
    if user is None:
        raise TeamError(f"no user is called {username.strip()!r}" if (username or "").strip() else "name the user to add or remove")
    return user


@transaction.atomic
def _change_membership(team: Group, username: str, add: bool, actor: Any, request: Any) -> Any:
    """Put the user ``username`` in ``team`` (``add``) or take them out; audited as ``team.add_member`` or
    ``team.remove_member``. Returns the user.

    Raises:
        PermissionDenied: ``actor`` is not staff.
        TeamError: no such user, or already in (out of) the team.
    """
    _check_staff(actor)
    user = _member(username)
    if user.groups.filter(pk=team.pk).exists() == add:
        raise TeamError(f"{user.get_username()} is {'in' if add else 'not in'} {team.name}{' already' if add else ''}")
    (user.groups.add if add else user.groups.remove)(team)
    record(f"team.{'add' if add else 'remove'}_member", actor=actor, obj=team, changes={"member": user.get_username()}, request=request)
    return user


def add_member(team: Group, username: str, actor: Any = None, request: Any = None) -> Any:
    """``_change_membership``: put ``username`` in ``team``."""
    return _change_membership(team, username, True, actor, request)


def remove_member(team: Group, username: str, actor: Any = None, request: Any = None) -> Any:
    """``_change_membership``: take ``username`` out of ``team``."""
    return _change_membership(team, username, False, actor, request)
