"""The review console: what a run's page shows, and each action posted as a form (htmx and plain)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from experts.models import Expert
from labeling.models import Assignment, Proposal, ReviewAction
from tests.factories import make_expert, make_team

from .conftest import proposal

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


@pytest.mark.parametrize(
    ("method", "name", "on"),
    [
        ("get", "labeling-runs", None), ("post", "labeling-start", None), ("get", "labeling-import", None), ("post", "labeling-import", None),
        ("get", "labeling-run", "run"), ("get", "labeling-unassigned", "run"), ("post", "labeling-merge", "run"),
        ("post", "labeling-move", "run"), ("post", "labeling-detach-noise", "run"), ("post", "labeling-attach-noise", "run"),
        ("post", "labeling-undo", "run"), ("post", "labeling-finish", "run"), ("get", "labeling-proposal-queries", "proposal"),
        ("post", "labeling-rename", "proposal"), ("post", "labeling-split", "proposal"), ("post", "labeling-discard", "proposal"),
        ("post", "labeling-promote", "proposal"),
    ],
)
def test_anonymous_users_are_sent_to_the_login_page(client, three_topics, method, name, on):
    args = {"run": [three_topics.pk], "proposal": [proposal(three_topics, "Licences").pk], None: []}[on]
    url = reverse(name, args=args)

    response = getattr(client, method)(url)

    assert response.status_code == 302
    assert response["Location"] == f"/login/?next={url}"
    assert not ReviewAction.objects.exists()


def test_the_run_page_shows_size_share_cohesion_nearest_and_the_unassigned_queries(console, three_topics):
    html = console.get(reverse("labeling-run", args=[three_topics.pk])).content.decode()

    licences = proposal(three_topics, "Licences")
    card = html[html.index(f'id="proposal-{licences.pk}"'):]
    card = card[: card.index("</article>")]
    assert '<dd class="size">6</dd>' in card
    assert '<dd class="share">42.9%</dd>' in card  # 6 of 14 queries
    assert '<dd class="cohesion"' in card
    assert ">0.9" in card
    assert "renew my driving licence 0" in card  # a representative
    assert html.index(f'id="proposal-{licences.pk}"') < html.index(f'id="proposal-{proposal(three_topics, "Passports").pk}"')  # largest first
    unassigned = html[html.index('id="unassigned-list"'):]
    assert "close to licences" in unassigned
    assert "far from everything" in unassigned
    assert '<strong id="unassigned-count">2</strong>' in html
    assert "No changes yet." in html
    assert 'id="undo-button"' not in html


def test_a_proposal_page_of_queries_lists_them_with_a_move_form(console, three_topics):
    licences = proposal(three_topics, "Licences")

    html = console.get(reverse("labeling-proposal-queries", args=[licences.pk]), headers=HTMX).content.decode()

    assert "<html" not in html
    assert html.count('name="queries"') == 6
    assert "1\u20136 of 6" in html
    assert f'<option value="{proposal(three_topics, "Passports").pk}">Passports</option>' in html


def test_renaming_through_htmx_swaps_in_the_updated_review(console, three_topics, owner):
    licences = proposal(three_topics, "Licences")

    response = console.post(reverse("labeling-rename", args=[licences.pk]), {"name": "Driving licences"}, headers=HTMX)

    assert response.status_code == 200
    html = response.content.decode()
    assert '<div id="run-body">' in html
    assert "<html" not in html
    assert "Renamed &#x27;Licences&#x27; to &#x27;Driving licences&#x27;." in html
    assert '<h2 class="proposal-name">Driving licences</h2>' in html
    assert 'id="undo-button"' in html
    assert ReviewAction.objects.get().user == owner


def test_without_javascript_an_action_redirects_back_with_a_message(console, three_topics):
    licences = proposal(three_topics, "Licences")

    response = console.post(reverse("labeling-rename", args=[licences.pk]), {"name": "Driving licences"}, follow=True)

    assert response.redirect_chain == [(reverse("labeling-run", args=[three_topics.pk]), 302)]
    assert "Renamed &#x27;Licences&#x27; to &#x27;Driving licences&#x27;." in response.content.decode()


def test_a_refused_action_answers_400_with_the_reason(console, three_topics):
    response = console.post(reverse("labeling-rename", args=[proposal(three_topics, "Licences").pk]), {"name": ""}, headers=HTMX)

    assert response.status_code == 400
    assert '<div class="notice error" role="alert" id="review-error">A proposal needs a name.</div>' in response.content.decode()
    assert not ReviewAction.objects.exists()


def test_merging_the_selected_proposals_into_a_chosen_one(console, three_topics):
    licences, passports, pensions = (proposal(three_topics, n) for n in ("Licences", "Passports", "Pensions"))

    response = console.post(reverse("labeling-merge", args=[three_topics.pk]), {"proposals": [passports.pk, pensions.pk], "target": passports.pk}, headers=HTMX)

    assert response.status_code == 200
    assert Proposal.objects.get(pk=passports.pk).size == 6
    assert Proposal.objects.get(pk=pensions.pk).status == "merged"
    assert Proposal.objects.get(pk=licences.pk).status == "proposed"
    assert "Merged 2 proposals into &#x27;Passports&#x27;." in response.content.decode()


def test_merging_without_a_target_picks_the_largest_selected(console, three_topics):
    licences, pensions = proposal(three_topics, "Licences"), proposal(three_topics, "Pensions")

    console.post(reverse("labeling-merge", args=[three_topics.pk]), {"proposals": [pensions.pk, licences.pk]}, headers=HTMX)

    assert Proposal.objects.get(pk=licences.pk).size == 8


def test_merging_one_proposal_is_refused(console, three_topics):
    response = console.post(reverse("labeling-merge", args=[three_topics.pk]), {"proposals": [proposal(three_topics, "Pensions").pk]}, headers=HTMX)

    assert response.status_code == 400
    assert "Select at least two proposals to merge." in response.content.decode()


def test_splitting_discarding_and_undoing_from_the_page(console, make_run):
    run = make_run({
        "Travel": (0, {0: [f"passport renewal {i}" for i in range(4)], 1: [f"visa for japan {i}" for i in range(4)]}),
        "Taxes": (3, [f"income tax return {i}" for i in range(4)]),
    })
    travel, taxes = proposal(run, "Travel"), proposal(run, "Taxes")

    html = console.post(reverse("labeling-split", args=[travel.pk]), {"k": "2"}, headers=HTMX).content.decode()
    assert "Split &#x27;Travel&#x27; into 2 proposals." in html
    assert run.proposals.filter(status="proposed").count() == 3

    console.post(reverse("labeling-discard", args=[taxes.pk]), headers=HTMX)
    assert Proposal.objects.get(pk=taxes.pk).status == "discarded"

    html = console.post(reverse("labeling-undo", args=[run.pk]), headers=HTMX).content.decode()
    assert "Undid: Discarded &#x27;Taxes&#x27;." in html
    html = console.post(reverse("labeling-undo", args=[run.pk]), headers=HTMX).content.decode()
    assert "Undid: Split &#x27;Travel&#x27; into 2" in html
    assert Proposal.objects.get(pk=travel.pk).status == "proposed"
    assert '<li class="undone">' in html


def test_moving_selected_queries_from_the_page(console, three_topics):
    licences, passports = proposal(three_topics, "Licences"), proposal(three_topics, "Passports")
    chosen = list(Assignment.objects.filter(proposal=licences).values_list("query_id", flat=True)[:2])

    response = console.post(reverse("labeling-move", args=[three_topics.pk]), {"queries": chosen, "target": passports.pk}, headers=HTMX)

    assert "Moved 2 queries to Passports." in response.content.decode()
    assert set(chosen) <= set(Assignment.objects.filter(proposal=passports).values_list("query_id", flat=True))


def test_moving_every_question_that_holds_some_words_from_the_page_and_undoing_it(console, make_run):
    run = make_run({
        "Government": (0, ["garbage collection day", "recycling bins for garbage", "council tax band", "pothole repair"]),
        "Cloud storage": (1, ["garbage in my backup folder", "sync a shared folder", "storage plan price"]),
    })
    government, cloud = proposal(run, "Government"), proposal(run, "Cloud storage")
    page = console.get(reverse("labeling-run", args=[run.pk])).content.decode()
    assert 'id="move-matching-form"' in page

    response = console.post(reverse("labeling-move", args=[run.pk]), {"matching": "GARBAGE", "source": government.pk, "target": cloud.pk}, headers=HTMX)

    assert "Moved 2 queries matching &#x27;GARBAGE&#x27; to Cloud storage." in response.content.decode()
    texts = set(Assignment.objects.filter(proposal=cloud).values_list("query__text", flat=True))
    assert {"garbage collection day", "recycling bins for garbage", "garbage in my backup folder"} <= texts
    assert "council tax band" not in texts
    html = console.post(reverse("labeling-undo", args=[run.pk]), headers=HTMX).content.decode()
    assert "Undid: Moved 2 queries matching &#x27;GARBAGE&#x27; to &#x27;Cloud storage&#x27;." in html
    assert Assignment.objects.filter(proposal=government).count() == 4

    nothing = console.post(reverse("labeling-move", args=[run.pk]), {"matching": "weather", "target": cloud.pk}, headers=HTMX).content.decode()
    assert "No query holds every word of &#x27;weather&#x27;." in nothing
    empty = console.post(reverse("labeling-move", args=[run.pk]), {"matching": "  ", "target": cloud.pk}, headers=HTMX).content.decode()
    assert "Select the queries to move, or type words they contain." in empty


def test_attaching_and_detaching_noise_from_the_page(console, three_topics):
    response = console.post(reverse("labeling-attach-noise", args=[three_topics.pk]), {"max_distance": "0.35"}, headers=HTMX)

    assert "Attached 1 queries within distance 0.35." in response.content.decode()
    assert Assignment.objects.filter(run=three_topics, proposal__isnull=True).count() == 1
    # The header's noise share says where attached noise went: "18% noise" beside "0 unassigned" read as a contradiction.
    assert "noise (1 placed in the nearest proposal)</span>" in response.content.decode()

    response = console.post(reverse("labeling-detach-noise", args=[three_topics.pk]), headers=HTMX)

    assert "Detached 1 noise queries" in response.content.decode()
    assert Assignment.objects.filter(run=three_topics, proposal__isnull=True).count() == 2
    assert "placed in the nearest proposal" not in response.content.decode()


def test_promoting_from_the_page_creates_the_expert_owned_by_the_runs_team(console, three_topics, team):
    licences = proposal(three_topics, "Licences")
    prefix = f"promote-{licences.pk}"

    response = console.post(reverse("labeling-promote", args=[licences.pk]), {
        f"{prefix}-name": "Driving licences", f"{prefix}-description": "Renewals.", f"{prefix}-seed_queries": ["renew my driving licence 1"],
    }, headers=HTMX)

    assert response.status_code == 200
    expert = Expert.objects.get(slug="driving-licences")
    assert (expert.name, expert.description, expert.team) == ("Driving licences", "Renewals.", team)
    assert Proposal.objects.get(pk=licences.pk).seed_queries == ["renew my driving licence 1"]
    html = response.content.decode()
    assert "Expert driving-licences · Reviewers" in html
    assert 'id="undo-button"' not in html


def test_the_promote_form_of_a_teams_run_names_its_team_and_offers_the_representatives(console, three_topics):
    Group.objects.create(name="Licensing desk")

    html = console.get(reverse("labeling-run", args=[three_topics.pk])).content.decode()

    assert "Owned by Reviewers, the run's team." in html
    assert ">Licensing desk</option>" not in html
    assert 'value="renew my driving licence 0"' in html
    assert "checked" in html


def test_on_a_staff_only_run_staff_choose_the_owning_team(console, make_run, owner):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    run = make_run({"Licences": (0, [f"renew my driving licence {i}" for i in range(4)])}, team=None)
    Group.objects.create(name="Licensing desk")

    html = console.get(reverse("labeling-run", args=[run.pk])).content.decode()

    assert ">Licensing desk</option>" in html
    assert "no team (staff only)" in html


def test_finishing_the_review_promotes_every_open_proposal(console, three_topics, owner):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    response = console.post(reverse("labeling-finish", args=[three_topics.pk]), headers=HTMX)

    assert response.status_code == 200
    assert sorted(Expert.objects.values_list("slug", flat=True)) == ["licences", "passports", "pensions"]
    three_topics.refresh_from_db()
    assert three_topics.status == "promoted"
    html = response.content.decode()
    assert 'id="finish-button"' not in html
    assert 'id="merge-form"' not in html


def test_the_unassigned_pages_answer_htmx(console, three_topics):
    html = console.get(reverse("labeling-unassigned", args=[three_topics.pk]), {"page": 1}, headers=HTMX).content.decode()

    assert '<div id="unassigned-list">' in html
    assert "<html" not in html
    assert "far from everything" in html


def test_an_unknown_run_is_404(console):
    assert console.get(reverse("labeling-run", args=[999])).status_code == 404


# --- teams ----------------------------------------------------------------------------------------

def test_a_member_promotes_into_the_runs_team_only_and_never_over_another_teams_expert(console, three_topics, owner, team):
    theirs = Group.objects.create(name="Pensions desk")
    owner.groups.add(theirs)  # even a member of the other team too: the run's team owns what it promotes
    make_expert("state-pensions", "State pensions", team=make_team("Benefits"), public=False)
    pensions, licences = proposal(three_topics, "Pensions"), proposal(three_topics, "Licences")

    def promote(p, name, team):
        prefix = f"promote-{p.pk}"
        return console.post(reverse("labeling-promote", args=[p.pk]), {f"{prefix}-name": name, f"{prefix}-team": team.pk if team else ""})

    assert promote(pensions, "State pensions", None).status_code == 403
    assert Expert.objects.get(slug="state-pensions").team.name == "Benefits"
    assert promote(licences, "Driving licences", theirs).status_code == 302  # the team posted is not the form's: ignored
    assert Expert.objects.get(slug="driving-licences").team == team


def test_only_staff_finish_a_review(console, three_topics):
    assert console.post(reverse("labeling-finish", args=[three_topics.pk])).status_code == 403
    three_topics.refresh_from_db()
    assert three_topics.status != "promoted"
