"""New Discovery work belongs to a team: who may import query logs and start clustering runs, and for which team.

A member's imports and runs are their team's (their only one by default); a member of several teams
chooses; staff choose any team or none (staff only); a user in no team is refused with the reason.
A run clusters its own team's queries only, so two teams' sources of the same name never mix.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.urls import reverse
from rest_framework.test import APIClient

from jobs.models import Job
from labeling import services
from labeling.access import NO_TEAM
from labeling.models import Query

from .conftest import CSV, XHR, add_query, direction

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("var_dir")]


@pytest.fixture
def signed_in(client, owner):
    client.force_login(owner)
    return client


def csv(name: str = "faq.csv") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, CSV, content_type="text/csv")


def api_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


# --- a user in no team ----------------------------------------------------------------------------

def test_a_user_in_no_team_cannot_import_from_the_console(signed_in):
    response = signed_in.post(reverse("labeling-import"), {"file": csv()}, headers=XHR)

    assert response.status_code == 403
    assert response.json() == {"error": {"message": NO_TEAM}}
    assert not Job.objects.exists()


def test_a_user_in_no_team_cannot_import_through_the_api(owner):
    response = api_for(owner).post("/api/v1/queries/import", {"file": csv()}, format="multipart")

    assert response.status_code == 403
    assert response.json()["error"]["message"] == NO_TEAM
    assert not Job.objects.exists()


def test_a_user_in_no_team_cannot_start_a_clustering_run(signed_in):
    response = signed_in.post(reverse("labeling-start"), {"source": "", "min_samples": "3"})

    assert response.status_code == 403
    assert NO_TEAM in response.content.decode()
    assert not Job.objects.exists()


def test_the_pages_tell_a_user_in_no_team_why_they_cannot_import_or_start_runs(signed_in):
    for url in (reverse("labeling-runs"), reverse("labeling-import")):
        html = signed_in.get(url).content.decode()
        assert NO_TEAM in html
        assert 'id="no-team"' in html
    assert 'id="import-form"' not in signed_in.get(reverse("labeling-import")).content.decode()


# --- members and staff ----------------------------------------------------------------------------

def test_a_members_import_belongs_to_their_only_team(signed_in, owner, team, django_capture_on_commit_callbacks):
    owner.groups.add(team)

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(reverse("labeling-import"), {"file": csv()}, headers=XHR)

    assert response.status_code == 202
    job = Job.objects.get()
    assert job.params["team"] == team.pk
    assert set(Query.objects.values_list("team", flat=True)) == {team.pk}


def test_a_member_of_several_teams_chooses_the_team(signed_in, owner, team, django_capture_on_commit_callbacks):
    other = Group.objects.create(name="Benefits")
    owner.groups.add(team, other)

    refused = signed_in.post(reverse("labeling-import"), {"file": csv()}, headers=XHR)
    api_refused = api_for(owner).post("/api/v1/queries/import", {"file": csv()}, format="multipart")
    with django_capture_on_commit_callbacks(execute=True):
        accepted = api_for(owner).post("/api/v1/queries/import", {"file": csv(), "team": "Benefits"}, format="multipart")

    assert refused.status_code == 400
    assert refused.json() == {"error": {"message": "Choose the team this is for."}}
    assert api_refused.status_code == 400
    assert api_refused.json()["error"]["message"] == "you belong to several teams (Benefits, Reviewers): choose the team this is for"
    assert accepted.status_code == 202
    assert Job.objects.get().params["team"] == other.pk
    assert set(Query.objects.values_list("team", flat=True)) == {other.pk}


def test_staff_import_for_any_team_or_for_none(signed_in, owner, team, django_capture_on_commit_callbacks):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])

    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(reverse("labeling-import"), {"file": csv("a.csv"), "team": team.pk}, headers=XHR)
        signed_in.post(reverse("labeling-import"), {"file": csv("b.csv")}, headers=XHR)

    assert sorted(Job.objects.values_list("params__source", "params__team")) == [("a", team.pk), ("b", None)]
    assert sorted(Query.objects.values_list("source", "team"), key=str) == sorted(
        [("a", team.pk), ("a", team.pk), ("b", None), ("b", None)], key=str,
    )


def test_the_same_file_imported_by_two_teams_gives_each_its_own_job_and_rows(django_user_model, team, django_capture_on_commit_callbacks):
    other = Group.objects.create(name="Benefits")
    alice = django_user_model.objects.create_user("alice", "alice@example.com", "pw-alice-1234")
    bob = django_user_model.objects.create_user("bob", "bob@example.com", "pw-bob-12345")
    alice.groups.add(team)
    bob.groups.add(other)

    with django_capture_on_commit_callbacks(execute=False):  # both jobs still queued: neither may get the other's
        first = api_for(alice).post("/api/v1/queries/import", {"file": csv()}, format="multipart").json()
        second = api_for(bob).post("/api/v1/queries/import", {"file": csv()}, format="multipart").json()
    assert first["job"] != second["job"]
    for job in Job.objects.order_by("pk"):
        with open(job.params["path"], "rb") as handle:
            services.import_queries(handle, job.params["name"], job.params["source"], team=Group.objects.get(pk=job.params["team"]))

    assert sorted(Query.objects.values_list("team", flat=True)) == sorted([team.pk, team.pk, other.pk, other.pk])


def test_the_import_command_takes_a_team(tmp_path, team):
    path = tmp_path / "faq.csv"
    path.write_bytes(CSV)

    call_command("import_queries", str(path), "--team", "Reviewers")
    call_command("import_queries", str(path))

    assert sorted(Query.objects.values_list("team", flat=True), key=str) == sorted([team.pk, team.pk, None, None], key=str)


# --- runs -----------------------------------------------------------------------------------------

def test_a_run_clusters_only_its_teams_queries_even_under_the_same_source_name(team):
    other = Group.objects.create(name="Benefits")
    for owner_team, axes in ((team, (0, 1)), (other, (2, 3))):
        for axis in axes:
            for i in range(6):
                add_query(f"{owner_team.name} topic {axis} question {i}", direction(axis, jitter=0.03, seed=10 * axis + i), source="helpdesk",
                          team=owner_team)

    run = services.cluster_queries(source="helpdesk", eps=0.2, min_samples=3, n_experts=2, team=team)
    again = services.cluster_queries(source="helpdesk", eps=0.2, min_samples=3, n_experts=2, team=other)

    assert (run.team, run.n_queries) == (team, 12)
    assert set(run.assignments.values_list("query__team", flat=True)) == {team.pk}
    assert (again.team, again.pk != run.pk) == (other, True)
    assert set(again.assignments.values_list("query__team", flat=True)) == {other.pk}


def test_a_members_run_belongs_to_their_team_and_its_job_says_so(signed_in, owner, team, django_capture_on_commit_callbacks):
    owner.groups.add(team)
    for axis in (0, 1, 2):
        for i in range(6):
            add_query(f"topic {axis} question {i}", direction(axis, jitter=0.03, seed=10 * axis + i), source="helpdesk", team=team)

    with django_capture_on_commit_callbacks(execute=True):
        response = signed_in.post(reverse("labeling-start"), {"source": "helpdesk", "eps": "0.2", "min_samples": "3", "n_experts": "3"})

    job = Job.objects.get()
    assert response["Location"] == f"/jobs/{job.pk}/"
    job.refresh_from_db()
    assert (job.status, job.params["team"]) == ("succeeded", team.pk)
    assert job.title == "Discover experts in helpdesk of Reviewers"


def test_a_member_reviews_and_promotes_their_own_run_into_their_team(signed_in, owner, team, django_capture_on_commit_callbacks):
    from experts.models import Expert
    from labeling.models import ClusteringRun

    owner.groups.add(team)
    for axis in (0, 1):
        for i in range(6):
            add_query(f"topic {axis} question {i}", direction(axis, jitter=0.03, seed=10 * axis + i), source="helpdesk", team=team)
    with django_capture_on_commit_callbacks(execute=True):
        signed_in.post(reverse("labeling-start"), {"source": "helpdesk", "eps": "0.2", "min_samples": "3", "n_experts": "2"})
    run = ClusteringRun.objects.get()
    first = run.proposals.order_by("index").first()

    assert signed_in.get(reverse("labeling-run", args=[run.pk])).status_code == 200
    assert signed_in.get(reverse("labeling-proposal-queries", args=[first.pk])).status_code == 200
    assert signed_in.post(reverse("labeling-rename", args=[first.pk]), {"name": "Topic zero"}).status_code == 302
    assert signed_in.post(reverse("labeling-promote", args=[first.pk]), {f"promote-{first.pk}-name": "Topic zero"}).status_code == 302

    assert Expert.objects.get(slug="topic-zero").team == team


def test_staff_choose_the_team_of_a_run_from_sources_grouped_by_team(signed_in, owner, team):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    add_query("licence question", direction(0), source="helpdesk", team=team)
    add_query("staff question", direction(1), source="legacy")

    html = signed_in.get(reverse("labeling-runs")).content.decode()
    refused = signed_in.post(reverse("labeling-start"), {"team": team.pk, "source": "legacy", "min_samples": "3"})

    assert '<optgroup label="Reviewers">' in html
    assert '<optgroup label="No team">' in html
    assert '<option value="" selected>No team (staff only)</option>' in html
    assert refused.status_code == 400
    assert "Reviewers has no source &#x27;legacy&#x27;." in refused.content.decode()
    assert not Job.objects.exists()
