"""Teams for staff: create one, and add or remove its members (``experts.teams`` does and audits each change)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from experts import teams
from labeling.forms import sentence
from sbcommon.console import LoginRequiredMixin


class StaffOnlyMixin(LoginRequiredMixin):
    def dispatch(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if request.user.is_authenticated and not request.user.is_staff:
            raise PermissionDenied("Only staff may manage teams.")
        return super().dispatch(request, *args, **kwargs)


class TeamListView(StaffOnlyMixin, View):
    """``/teams/``: every team with its members and experts counted, and the form that creates one."""

    template_name = "console/teams.html"

    def _render(self, request: HttpRequest, error: str = "", name: str = "", status: int = 200) -> HttpResponse:
        rows = Group.objects.annotate(members=Count("user", distinct=True), n_experts=Count("experts", distinct=True)).order_by("name")
        return render(request, self.template_name, {"teams": rows, "error": error, "name": name}, status=status)

    def get(self, request: HttpRequest) -> HttpResponse:
        return self._render(request)

    def post(self, request: HttpRequest) -> HttpResponse:
        try:
            team = teams.create_team(request.POST.get("name", ""), actor=request.user, request=request)
        except teams.TeamError as exc:
            return self._render(request, sentence(str(exc)), request.POST.get("name", ""), status=400)
        messages.success(request, f"Created the team {team.name}: add its members below.")
        return redirect("console-team", team.pk)


class TeamView(StaffOnlyMixin, View):
    """``/teams/<pk>/``: a team's members, with forms to add one and remove each (POST ``action`` add or remove, ``username``)."""

    template_name = "console/team.html"

    def _render(self, request: HttpRequest, team: Group, error: str = "", status: int = 200) -> HttpResponse:
        members = team.user_set.order_by("username")
        others = get_user_model().objects.filter(is_active=True).exclude(groups=team).order_by("username").values_list("username", flat=True)
        return render(request, self.template_name, {
            "team": team, "members": members, "others": list(others), "experts": team.experts.order_by("name"), "error": error,
        }, status=status)

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return self._render(request, get_object_or_404(Group, pk=pk))

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        team = get_object_or_404(Group, pk=pk)
        action, username = request.POST.get("action"), request.POST.get("username", "")
        change = {"add": teams.add_member, "remove": teams.remove_member}.get(action or "")
        if change is None:
            return self._render(request, team, "Choose to add or remove a member.", status=400)
        try:
            user = change(team, username, actor=request.user, request=request)
        except teams.TeamError as exc:
            return self._render(request, team, sentence(str(exc)), status=400)
        messages.success(request, f"Added {user.get_username()} to {team.name}." if action == "add" else f"Removed {user.get_username()} from {team.name}.")
        return redirect("console-team", team.pk)
