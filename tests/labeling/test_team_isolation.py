"""Discovery keeps teams apart: team A never sees team B's imports, runs, proposals or jobs, and cannot change them.

Team B's imported questions, file name, source, run and proposal names all carry ``MARKER``; every
page and API endpoint A reaches is searched for it. B (and staff) see it, so its absence means A is
refused, not that the page is empty.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

from experts.models import Expert
from jobs.models import Job
from labeling import proposals as edits
from labeling import services
from labeling.models import Assignment, ClusteringRun, Proposal, Query, ReviewAction

from .conftest import PASSWORD, direction, proposal

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("var_dir")]
MARKER = "Zebrafish7731"
HTMX = {"HX-Request": "true"}


@pytest.fixture
def teams(db) -> tuple[Group, Group]:
    return Group.objects.create(name="Team A"), Group.objects.create(name="Team B")


@pytest.fixture
def alice(django_user_model, teams):
    user = django_user_model.objects.create_user("alice", "alice@example.com", PASSWORD)
    user.groups.add(teams[0])
    return user


@pytest.fixture
def bob(django_user_model, teams):
    user = django_user_model.objects.create_user("bob", "bob@example.com", PASSWORD)
    user.groups.add(teams[1])
    return user


def signed_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def theirs(bob, teams, make_run, django_capture_on_commit_callbacks) -> ClusteringRun:
    """Team B's import (file and source named after the marker), a queued discovery job, and a run under review."""
    source = f"{MARKER}-log"
    rows = "".join(f"{MARKER} question {i}\n" for i in range(3))
    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in(bob).post(reverse("labeling-import"), {"file": SimpleUploadedFile(f"{source}.csv", f"text\n{rows}".encode())})
    assert response.status_code == 302
    with django_capture_on_commit_callbacks(execute=False):  # stays queued: its title names the source
        services.enqueue_discovery(source=source, user=bob)
    run = make_run(
        {
            f"{MARKER} licences": (0, [f"{MARKER} renew licence {i}" for i in range(6)]),
            f"{MARKER} passports": (1, [f"{MARKER} passport {i}" for i in range(4)]),
        },
        noise={f"{MARKER} stray": direction(9)}, team=teams[1], source=source,
    )
    edits.rename_proposal(proposal(run, f"{MARKER} passports"), f"{MARKER} travel", user=bob)  # something to undo
    return run


@pytest.fixture
def mine(make_run, teams) -> ClusteringRun:
    """Team A's own run, so A's pages have something of A's to show."""
    return make_run({"Benefits": (3, [f"housing benefit {i}" for i in range(4)])}, team=teams[0])


def snapshot(run: ClusteringRun) -> dict[str, object]:
    """Every row of the run that a review action could change."""
    return {
        "proposals": sorted(Proposal.objects.filter(run=run).values_list("pk", "name", "status", "size", "merged_into_id", "expert_id")),
        "assignments": sorted(Assignment.objects.filter(run=run).values_list("pk", "proposal_id")),
        "actions": sorted(ReviewAction.objects.filter(run=run).values_list("pk", "undone")),
        "run": ClusteringRun.objects.filter(pk=run.pk).values_list("status", "team_id").get(),
        "experts": Expert.objects.count(),
    }


def their_pages(run: ClusteringRun) -> list[str]:
    return [
        reverse("labeling-run", args=[run.pk]),
        reverse("labeling-unassigned", args=[run.pk]) + "?page=1",
        *(reverse("labeling-proposal-queries", args=[p.pk]) for p in run.proposals.all()),
    ]


def test_the_marker_is_on_team_bs_own_pages(theirs, bob):
    client = signed_in(bob)

    for url in [reverse("labeling-runs"), reverse("labeling-import"), *their_pages(theirs)]:
        response = client.get(url)
        assert response.status_code == 200, url
        assert MARKER in response.content.decode(), url


def test_team_a_sees_none_of_team_bs_runs_sources_or_jobs_in_the_lists(theirs, mine, alice):
    client = signed_in(alice)

    for url in [reverse("labeling-runs"), reverse("labeling-import")]:
        response = client.get(url)
        assert response.status_code == 200
        assert MARKER not in response.content.decode(), url
    html = client.get(reverse("labeling-runs")).content.decode()
    assert f"Clustering #{mine.pk}</a>" in html
    assert f"Clustering #{theirs.pk}</a>" not in html
    assert "4 queries imported." in html  # A's own count, not B's


@pytest.mark.parametrize("headers", [{}, HTMX], ids=["page", "htmx"])
def test_team_bs_run_and_proposal_pages_are_not_found_for_team_a(theirs, alice, headers):
    client = signed_in(alice)

    for url in their_pages(theirs):
        response = client.get(url, headers=headers)
        assert response.status_code == 404, url
        assert MARKER not in response.content.decode(), url


def test_team_a_cannot_review_team_bs_run(theirs, alice):
    client = signed_in(alice)
    licences, travel = proposal(theirs, f"{MARKER} licences"), proposal(theirs, f"{MARKER} travel")
    queries = list(Assignment.objects.filter(proposal=licences).values_list("query_id", flat=True)[:2])
    before = snapshot(theirs)
    posts = {
        "labeling-rename": (licences.pk, {"name": "renamed by A"}),
        "labeling-discard": (licences.pk, {}),
        "labeling-split": (licences.pk, {"k": "2"}),
        "labeling-promote": (licences.pk, {f"promote-{licences.pk}-name": "Taken by A"}),
        "labeling-merge": (theirs.pk, {"proposals": [licences.pk, travel.pk]}),
        "labeling-move": (theirs.pk, {"queries": queries, "target": travel.pk}),
        "labeling-detach-noise": (theirs.pk, {}),
        "labeling-attach-noise": (theirs.pk, {"max_distance": "2"}),
        "labeling-undo": (theirs.pk, {}),
        "labeling-finish": (theirs.pk, {}),
    }

    for name, (pk, data) in posts.items():
        for headers in ({}, HTMX):
            response = client.post(reverse(name, args=[pk]), data, headers=headers)
            assert response.status_code == 404, name
            assert MARKER not in response.content.decode(), name

    assert snapshot(theirs) == before
    assert not Expert.objects.exists()


def test_team_a_cannot_import_into_team_b_through_the_console_or_the_api(theirs, alice, teams):
    jobs, queries = Job.objects.count(), Query.objects.filter(team=teams[1]).count()
    upload = {"file": SimpleUploadedFile("mine.csv", b"text\nWhere is my refund?\n"), "team": teams[1].pk}

    console = signed_in(alice).post(reverse("labeling-import"), upload)
    api = APIClient()
    api.force_authenticate(alice)
    response = api.post("/api/v1/queries/import", {"file": SimpleUploadedFile("mine.csv", b"text\nWhere is my refund?\n"), "team": "Team B"},
                        format="multipart")

    assert console.status_code == 400  # not a choice A is offered
    assert response.status_code == 403
    assert response.json()["error"]["message"] == "You are not in Team B: import queries and start runs for your own teams only."
    assert (Job.objects.count(), Query.objects.filter(team=teams[1]).count()) == (jobs, queries)


def test_team_a_cannot_start_a_run_for_team_b(theirs, alice, teams):
    jobs = Job.objects.count()

    response = signed_in(alice).post(reverse("labeling-start"), {"team": teams[1].pk, "source": "", "min_samples": "3"})

    assert response.status_code == 400
    assert "You may import queries and start runs for your own teams only." in response.content.decode()
    assert MARKER not in response.content.decode()
    assert Job.objects.count() == jobs


def test_staff_see_every_teams_runs(theirs, django_user_model):
    staff = django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)

    assert f"Clustering #{theirs.pk}</a>" in signed_in(staff).get(reverse("labeling-runs")).content.decode()
    assert signed_in(staff).get(reverse("labeling-run", args=[theirs.pk])).status_code == 200
