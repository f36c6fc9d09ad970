"""Discarding an abandoned discovery run: the service (audited, team-isolated, never a promoted run) and the run page's form."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.core.exceptions import PermissionDenied
from django.urls import reverse

from labeling import services
from labeling.models import ClusteringRun, Query, ReviewAction
from labeling.proposals import ReviewError, promote_run, rename_proposal
from tests.factories import make_user

from .conftest import proposal

pytestmark = pytest.mark.django_db


def test_discarding_a_run_records_who_did_it_and_ends_its_review(three_topics, owner, team):
    owner.groups.add(team)

    services.discard_run(three_topics, user=owner)

    three_topics.refresh_from_db()
    action = ReviewAction.objects.get(run=three_topics)
    assert three_topics.status == "discarded"
    assert (action.action, action.user, action.summary) == ("discard_run", owner, "Discarded the run (3 proposals left in review)")
    with pytest.raises(ReviewError, match="this run was discarded; start a new clustering run"):
        rename_proposal(proposal(three_topics, "Licences"), "Driving")
    with pytest.raises(ReviewError, match="already discarded"):
        services.discard_run(three_topics, user=owner)


def test_a_promoted_run_cannot_be_discarded(three_topics):
    promote_run(three_topics)

    with pytest.raises(ReviewError, match="this run has been promoted: its experts exist and the router learns from it"):
        services.discard_run(three_topics, user=make_user("admin", staff=True))

    three_topics.refresh_from_db()
    assert three_topics.status == "promoted"


def test_only_the_runs_team_and_staff_may_discard_it(three_topics):
    stranger = make_user("bob", teams=(Group.objects.create(name="Others"),))

    with pytest.raises(PermissionDenied):
        services.discard_run(three_topics, user=stranger)
    services.discard_run(three_topics, user=make_user("admin", staff=True))

    assert ClusteringRun.objects.get(pk=three_topics.pk).status == "discarded"


def test_the_run_page_discards_with_confirmation_and_the_run_leaves_the_list(console, three_topics):
    url = reverse("labeling-discard-run", args=[three_topics.pk])
    page = console.get(reverse("labeling-run", args=[three_topics.pk])).content.decode()
    assert f'action="{url}"' in page

    unconfirmed = console.post(url, follow=True)
    assert ClusteringRun.objects.get(pk=three_topics.pk).status == "draft"
    assert "Tick the box to confirm" in unconfirmed.content.decode()

    response = console.post(url, {"confirm": "yes"})

    assert response.status_code == 302
    assert response["Location"] == reverse("labeling-runs")
    listed = console.get(reverse("labeling-runs"))
    assert three_topics not in list(listed.context["runs"])
    discarded = console.get(reverse("labeling-run", args=[three_topics.pk])).content.decode()
    assert 'id="run-discarded"' in discarded
    assert 'id="discard-run-button"' not in discarded
    assert 'id="finish-button"' not in discarded


def test_another_teams_member_gets_a_404_and_the_run_stays(client, three_topics):
    client.force_login(make_user("bob", teams=(Group.objects.create(name="Others"),)))

    response = client.post(reverse("labeling-discard-run", args=[three_topics.pk]), {"confirm": "yes"})

    assert response.status_code == 404
    assert ClusteringRun.objects.get(pk=three_topics.pk).status == "draft"


def test_the_same_discovery_started_again_makes_a_new_run_instead_of_returning_the_discarded_one(three_topics, team):
    for name in ("Licences", "Passports", "Pensions"):
        Query.objects.filter(assignments__proposal__name=name).update(label=name.lower())
    first = services.run_from_labels(team=team)
    assert services.run_from_labels(team=team) == first

    services.discard_run(first)
    again = services.run_from_labels(team=team)

    assert again != first
    assert (again.status, again.fingerprint) == ("draft", first.fingerprint)


def test_a_review_action_on_a_discarded_run_through_the_api_is_a_conflict(console, three_topics):
    services.discard_run(three_topics)

    response = console.post(f"/api/v1/discovery/proposals/{proposal(three_topics, 'Licences').pk}/rename", {"name": "Driving"},
                            content_type="application/json")

    assert response.status_code == 409
    assert "this run was discarded" in response.json()["error"]["message"]
