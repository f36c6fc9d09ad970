"""Who may see and change Discovery's data: imported queries, clustering runs, their proposals and jobs.

On top of ``experts.access``: imports and runs belong to a team or to none, and a run clusters its own
team's queries only. Staff see and change everything; a member of a run's team reviews it and sees the
team's imports and jobs; work with no team is staff-only; anyone else gets a 404. New work belongs to
the team ``team_for_new_work`` gives, which refuses a non-staff user with no team or another team.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404

from experts.access import can_edit, is_staff, signed_in, user_teams
from experts.models import Expert
from experts.services import slug_for

from .models import ClusteringRun, Proposal

NO_TEAM = (
    "You belong to no team, so you cannot import queries or start clustering runs: "
    "ask an administrator to add you to your team."
)


class TeamNeeded(ValueError):
    """A user in several teams asked for new work without saying which team it belongs to (a 400, not a 403)."""


def work_teams(user: Any) -> QuerySet[Group]:
    """The teams ``user`` may import into and start runs for: every team for staff, their own otherwise."""
    if is_staff(user):
        return Group.objects.order_by("name")
    return user_teams(user).order_by("name")


def team_ids(user: Any) -> list[int] | None:
    """The ids of the teams whose Discovery data ``user`` sees; ``None`` for staff, who see all of it."""
    if is_staff(user):
        return None
    return list(user_teams(user).values_list("pk", flat=True))


def visible_runs(user: Any, queryset: QuerySet[ClusteringRun] | None = None) -> QuerySet[ClusteringRun]:
    """The clustering runs ``user`` may see and review (a filter of ``queryset``, default all runs)."""
    qs = ClusteringRun.objects.all() if queryset is None else queryset
    if not signed_in(user):
        return qs.none()
    ids = team_ids(user)
    return qs if ids is None else qs.filter(team_id__in=ids)


def can_review(user: Any, run: ClusteringRun) -> bool:
    """Whether ``user`` may see and review ``run``: staff, or a member of its team."""
    if not signed_in(user):
        return False
    return bool(user.is_staff or (run.team_id is not None and user.groups.filter(pk=run.team_id).exists()))


def get_run_or_404(user: Any, pk: int) -> ClusteringRun:
    """The run ``pk`` if ``user`` may see it; 404 otherwise (another team's run is "not found")."""
    run = ClusteringRun.objects.filter(pk=pk).select_related("team").first()
    if run is None or not can_review(user, run):
        raise Http404(f"no clustering run {pk}")
    return run


def get_proposal_or_404(user: Any, pk: int) -> Proposal:
    """The proposal ``pk`` if ``user`` may see its run; 404 otherwise."""
    proposal = Proposal.objects.filter(pk=pk).select_related("run", "run__team").first()
    if proposal is None or not can_review(user, proposal.run):
        raise Http404(f"no proposal {pk}")
    return proposal


def may_start_work(user: Any) -> bool:
    """Whether ``user`` may import queries and start runs at all: staff, or a member of some team."""
    return is_staff(user) or (signed_in(user) and user_teams(user).exists())


def team_for_new_work(user: Any, team: Group | None = None) -> Group | None:
    """The team a new import or clustering run of ``user`` belongs to.

    Staff choose any team, or none (``team=None``: staff-only work). A member's work belongs to the
    team they name, by default their only team.

    Raises:
        PermissionDenied: anonymous, a non-staff user in no team (``NO_TEAM``), or a team they are not in.
        TeamNeeded: a member of several teams named none.
    """
    if not signed_in(user):
        raise PermissionDenied("Sign in to import queries or start clustering runs.")
    if user.is_staff:
        return team
    mine = list(user_teams(user).order_by("name"))
    if not mine:
        raise PermissionDenied(NO_TEAM)
    if team is None:
        if len(mine) == 1:
            return mine[0]
        raise TeamNeeded(f"you belong to several teams ({', '.join(t.name for t in mine)}): choose the team this is for")
    if team.pk not in {t.pk for t in mine}:
        raise PermissionDenied(f"You are not in {team.name}: import queries and start runs for your own teams only.")
    return team


def promotion_team(user: Any, proposal: Proposal, name: str, team: Group | None) -> Group | None:
    """The team the expert promoted from ``proposal`` as ``name`` belongs to, once ``user`` may promote it there.

    A team's run promotes into that team; a staff-only run into ``team``. Staff promote anything; a
    member promotes into their own team, never over an expert they may not change (promoting reuses
    the expert that has the name's slug).

    Raises:
        PermissionDenied: the member may not promote there, or an expert of that name is another team's.
    """
    team = proposal.run.team if proposal.run.team_id is not None else team
    if user.is_staff:
        return team
    if team is None or not user.groups.filter(pk=team.pk).exists():  # a member only ever sees their team's runs: defence in depth
        raise PermissionDenied("Promote to one of your teams; only staff create experts without a team or for other teams.")
    existing = proposal.expert or Expert.objects.filter(slug=slug_for(" ".join(name.split()))).first()
    if existing is not None and not can_edit(user, existing):
        raise PermissionDenied(f"An expert named {existing.name} exists and belongs to another team.")
    return team


def check_finish(user: Any) -> None:
    """Finishing a review promotes every open proposal as an expert in one step: a staff decision (PermissionDenied otherwise)."""
    if not is_staff(user):
        raise PermissionDenied("Only staff users may finish a review (it promotes every open proposal).")
