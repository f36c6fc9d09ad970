"""Who may see and change which expert: teams (Django groups) own experts, staff see everything.

Every console page and API endpoint that shows or changes an expert's data goes through these
functions, so the rule lives in one place:

- staff (``is_staff``) see and change every expert;
- a signed-in member of an expert's team sees and changes that expert and its data;
- an expert with no team is visible to every signed-in user and changeable by staff only;
- everyone else sees nothing of it: ``get_expert_or_404`` answers 404 for an expert the user may
  not see (so its existence is not revealed) and ``PermissionDenied`` (403) for one they may see but
  not change.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import Http404

from .models import Expert


def _anonymous(user) -> bool:
    return user is None or not getattr(user, "is_authenticated", False) or not getattr(user, "is_active", False)


def visible_experts(user, queryset: QuerySet[Expert] | None = None) -> QuerySet[Expert]:
    """The experts ``user`` may see (a filter of ``queryset``, default all experts)."""
    qs = Expert.objects.all() if queryset is None else queryset
    if _anonymous(user):
        return qs.none()
    if user.is_staff:
        return qs
    return qs.filter(Q(team__isnull=True) | Q(team__in=user.groups.all())).distinct()


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


def get_expert_or_404(user, slug: str, *, edit: bool = False) -> Expert:
    """The expert ``slug`` if ``user`` may see it (404 otherwise); with ``edit``, 403 unless they may change it."""
    expert = Expert.objects.filter(slug=slug).select_related("team").first()
    if expert is None or not can_view(user, expert):
        raise Http404(f"no expert {slug!r}")
    if edit and not can_edit(user, expert):
        raise PermissionDenied(f"you may view {expert.name} but not change it; ask its team ({expert.team or 'staff'})")
    return expert
