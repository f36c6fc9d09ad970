"""Who may see, change and ask which expert: the one access rule of the console, the API and serving.

Read from current team membership at request time, never copied into a key or a session.
- **See and change**: staff everything; a team member their team's experts; an expert with no team
  is visible to every signed-in user and changeable by staff only. ``get_expert_or_404`` is a 404 for
  an expert the user may not see and a 403 for one they may see but not change.
- **Ask**: what the principal's user may see plus every public expert; anonymous callers public ones
  only; a key what its user may ask today, narrowed to its scopes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.db.models.signals import m2m_changed, post_delete, post_save
from django.http import Http404

from clients.models import ApiKey

from .models import Expert
from .selectors import clear_serving_caches, serving_cached


def _anonymous(user) -> bool:
    return user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False)


def signed_in(user) -> bool:
    """Whether ``user`` is a signed-in, active user (the other apps' team rules start from this too)."""
    return not _anonymous(user)


def is_staff(user) -> bool:
    return signed_in(user) and bool(user.is_staff)


@dataclass(frozen=True)
class Principal:
    """Who is asking: ``user`` (signed in, or the key's owner) and ``key`` (the API key used, if any).

    Build it with ``Principal.of(request)`` at the edge (a view); services take it as it is.
    """

    user: Any = None
    key: ApiKey | None = None

    @classmethod
    def of(cls, request) -> Principal:
        """The principal of a Django or DRF request: its API key (with the key's owner) or its signed-in user."""
        key = getattr(request, "auth", None)
        if isinstance(key, ApiKey):
            return cls(user=key.created_by, key=key)
        user = getattr(request, "user", None)
        return cls(user=None if _anonymous(user) else user)

    @property
    def user_id(self) -> int | None:
        """The signed-in user's id (None for a key, whose requests are the key's, or for anonymous callers)."""
        return None if self.key is not None or _anonymous(self.user) else self.user.pk


def visible_experts(user, queryset: QuerySet[Expert] | None = None) -> QuerySet[Expert]:
    """The experts ``user`` may see in the console (a filter of ``queryset``, default all experts)."""
    qs = Expert.objects.all() if queryset is None else queryset
    if _anonymous(user):
        return qs.none()
    if user.is_staff:
        return qs
    return qs.filter(Q(team__isnull=True) | Q(team__in=user.groups.all())).distinct()


def askable_experts(principal: Principal, queryset: QuerySet[Expert] | None = None) -> QuerySet[Expert]:
    """The experts ``principal`` may ask (route to, retrieve from, name as ``model``): see the module docstring."""
    qs = Expert.objects.all() if queryset is None else queryset
    user = None if _anonymous(principal.user) else principal.user
    if user is None:
        mine = qs.filter(public=True)
    elif user.is_staff:
        mine = qs
    else:
        mine = qs.filter(Q(public=True) | Q(team__isnull=True) | Q(team__in=user.groups.all())).distinct()
    if principal.key is not None and principal.key.scopes:
        mine = mine.filter(slug__in=principal.key.scopes)
    return mine


def askable_slugs(principal: Principal) -> set[str]:
    """The slugs of ``askable_experts``: what serving takes as ``allowed`` (always a set, never "everything").

    Read on every chat request, so kept with the serving caches (``experts.selectors.serving_cached``):
    a change of an expert, a user or a team membership clears them at once in this process, and other
    processes see it within ``SERVING_CACHE_TTL_S``.
    """
    user = principal.user if signed_in(principal.user) else None
    key = principal.key
    memo = ("askable", user.pk if user else None, key.pk if key else None, tuple(key.scopes or ()) if key else ())
    return set(serving_cached(memo, lambda: frozenset(askable_experts(principal).values_list("slug", flat=True))))


# Who may ask what changes with a user (active, staff), their teams or a team's deletion: forget what serving kept.
post_save.connect(clear_serving_caches, sender=User, dispatch_uid="serving-cache-user-save")
post_delete.connect(clear_serving_caches, sender=Group, dispatch_uid="serving-cache-team-delete")
m2m_changed.connect(clear_serving_caches, sender=User.groups.through, dispatch_uid="serving-cache-user-teams")


def visible_slugs(user) -> set[str]:
    return set(visible_experts(user).values_list("slug", flat=True))


def visible_names(user) -> dict[str, str]:
    """The display name of each expert ``user`` may see, by slug, in one query."""
    return dict(visible_experts(user).values_list("slug", "name"))


def editable_slugs(user) -> set[str]:
    """The slugs of the experts ``user`` may change, in one query (the rule of ``can_edit``)."""
    if _anonymous(user):
        return set()
    experts = Expert.objects.all() if user.is_staff else Expert.objects.filter(team__in=user.groups.all())
    return set(experts.values_list("slug", flat=True))


def can_view(user, expert: Expert) -> bool:
    if _anonymous(user):
        return False
    return bool(user.is_staff or expert.team_id is None or user.groups.filter(pk=expert.team_id).exists())


def can_edit(user, expert: Expert) -> bool:
    if _anonymous(user):
        return False
    if user.is_staff:
        return True
    return expert.team_id is not None and user.groups.filter(pk=expert.team_id).exists()


def user_teams(user) -> QuerySet:
    """The teams (groups) ``user`` belongs to (none for anonymous callers)."""
    if _anonymous(user):
        return Group.objects.none()
    return user.groups.all()


def get_expert_or_404(user, slug: str, *, edit: bool = False) -> Expert:
    """The expert ``slug`` if ``user`` may see it (404 otherwise); with ``edit``, 403 unless they may change it."""
    expert = Expert.objects.filter(slug=slug).select_related("team").first()
    if expert is None or not can_view(user, expert):
        raise Http404(f"no expert {slug!r}")
    if edit and not can_edit(user, expert):
        raise PermissionDenied(f"you may view {expert.name} but not change it; ask its team ({expert.team or 'staff'})")
    return expert
