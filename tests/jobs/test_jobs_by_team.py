"""Jobs between two teams: a job that names another team's expert or belongs to another team is not found,
whoever started it, and a platform-wide job's text shows no other team's expert."""

from __future__ import annotations

import pytest
from django.urls import reverse

from jobs.models import Job
from tests.factories import NAME_B, SLUG_B, make_user, two_teams

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams():
    """Team A (roads: ``dmv``), team B (pensions: ``vault-7f3a``), a member of each, and staff."""
    roads, pensions = two_teams()
    return make_user("ana", teams=(roads,)), make_user("bob", teams=(pensions,)), make_user("admin", staff=True), pensions


def test_a_job_of_another_teams_expert_is_not_found_even_by_who_started_it(client, teams):
    ana, bob, _staff, _pensions = teams
    # Ana started it while she was in pensions; she has since moved to roads.
    job = Job.objects.create(kind="index_documents", key=f"index:{SLUG_B}", title=f"Index {NAME_B} documents", params={"expert": SLUG_B},
                             created_by=ana, status="failed", task_name="knowledge.tasks.index_expert_documents")
    client.force_login(ana)

    assert NAME_B not in client.get(reverse("console-jobs")).content.decode()
    assert NAME_B not in client.get(reverse("console-overview")).content.decode()
    assert client.get(reverse("console-job", args=[job.pk])).status_code == 404
    assert client.get(reverse("api-job", args=[job.pk])).status_code == 404
    assert client.post(reverse("console-job-retry", args=[job.pk])).status_code == 404
    assert client.post(reverse("console-job-cancel", args=[job.pk])).status_code == 404
    assert Job.objects.count() == 1
    assert Job.objects.get().status == "failed"

    client.force_login(bob)
    assert client.get(reverse("console-job", args=[job.pk])).status_code == 200


def test_a_job_of_another_team_is_not_found_and_one_of_no_team_is_staffs(client, teams):
    ana, bob, staff, pensions = teams
    theirs = Job.objects.create(kind="import_queries", key="import:b", title="Import MARKER-B questions.csv", params={"team": pensions.pk})
    nobodys = Job.objects.create(kind="discover", key="discover:x", title="Discover experts in all queries", params={"team": None})

    for user, found in ((ana, set()), (bob, {theirs.pk}), (staff, {theirs.pk, nobodys.pk})):
        client.force_login(user)
        assert {job.pk for job in client.get(reverse("console-jobs")).context["jobs"]} == found
        assert client.get(reverse("api-job", args=[theirs.pk])).status_code == (200 if theirs.pk in found else 404)
        assert client.get(reverse("console-job", args=[nobodys.pk])).status_code == (200 if nobodys.pk in found else 404)


def test_a_platform_wide_jobs_text_does_not_name_another_teams_expert(client, teams):
    ana, bob, staff, _pensions = teams
    job = Job.objects.create(
        kind="train_router", key="train_router", title="Train router", status="running", message=f"{NAME_B}: 12 questions",
        log=f"experts without labelled queries are not routable: {SLUG_B}, dmv\nundecided experts: {SLUG_B}",
        result={"alarms": [SLUG_B, "dmv"], SLUG_B: 0.5}, error=f"{NAME_B} had no documents",
    )
    client.force_login(ana)

    pages = [client.get(reverse(name, args=args)).content.decode() for name, args in
             (("console-jobs", []), ("console-job-rows", []), ("console-job", [job.pk]), ("console-job-body", [job.pk]), ("console-overview", []))]
    for page in pages:
        assert SLUG_B not in page
        assert "MARKER-B" not in page
    detail = pages[2]
    assert "not routable: another team&#x27;s expert, dmv" in detail  # her own experts and the job's figures stay
    assert client.get(reverse("console-job", args=[job.pk])).context["job"].result == {"alarms": ["another team's expert", "dmv"],
                                                                                        "another team's expert": 0.5}
    job.refresh_from_db()
    assert SLUG_B in job.log  # shown redacted, never saved so

    for user in (bob, staff):
        client.force_login(user)
        assert SLUG_B in client.get(reverse("console-job", args=[job.pk])).content.decode()
