"""Factories for the models tests make most: experts, teams, users, API keys and promoted runs (not a test module)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Group, User

from clients.services import CreatedKey, create_key
from experts.models import Expert
from labeling.models import ClusteringRun


def make_user(username: str = "operator", *, staff: bool = False, teams: tuple[Group, ...] = ()) -> User:
    """A user (created once by name), a member of ``teams``."""
    user, _ = User.objects.get_or_create(username=username, defaults={"is_staff": staff})
    user.groups.add(*teams)
    return user


def make_team(name: str) -> Group:
    return Group.objects.get_or_create(name=name)[0]


def make_expert(slug: str, name: str | None = None, *, public: bool = True, **fields: Any) -> Expert:
    """An active expert; public by default, as the demo's are, so anonymous test callers may ask it."""
    return Expert.objects.create(slug=slug, name=name or slug.upper(), public=public, **fields)


def roads_and_pensions() -> tuple[Group, Group]:
    """Team roads with ``dmv`` (Motor Vehicles) and team pensions with ``ssa`` (Social Security), both private."""
    roads, pensions = make_team("roads"), make_team("pensions")
    make_expert("dmv", "Motor Vehicles", team=roads, public=False)
    make_expert("ssa", "Social Security", team=pensions, public=False)
    return roads, pensions


# Team B's expert, named with a marker that a team A page must never show.
SLUG_B, NAME_B = "vault-7f3a", "MARKER-B Pension Vault"


def two_teams() -> tuple[Group, Group]:
    """Team A (roads: ``dmv``) and team B (pensions: ``SLUG_B``), their experts private."""
    roads, pensions = make_team("roads"), make_team("pensions")
    make_expert("dmv", "Motor Vehicles", team=roads, public=False)
    make_expert(SLUG_B, NAME_B, team=pensions, public=False)
    return roads, pensions


def make_key(name: str = "test client", *, created_by: User | None = None, **fields: Any) -> CreatedKey:
    """An API key; it acts for ``created_by`` (by default a staff operator, who may ask every expert)."""
    return create_key(name, created_by=created_by or make_user("key-operator", staff=True), **fields)


def make_promoted_run(*experts: Expert) -> ClusteringRun:
    """A promoted clustering run with one promoted proposal per expert (in order), named as its expert."""
    run = ClusteringRun.objects.create(model="m", eps=0.2, min_samples=3, n_experts=len(experts), fingerprint="f", status="promoted")
    for index, expert in enumerate(experts):
        run.proposals.create(index=index, name=expert.name, status="promoted", expert=expert)
    return run
