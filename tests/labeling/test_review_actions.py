"""Review actions on a clustering run, each recorded and undone (services, no HTTP)."""

from __future__ import annotations

import pytest

from labeling import proposals as edits
from labeling import selectors
from labeling.models import Assignment, Proposal, ReviewAction

from .conftest import direction, proposal

pytestmark = pytest.mark.django_db


def members(p: Proposal) -> set[int]:
    return set(Assignment.objects.filter(proposal=p).values_list("query_id", flat=True))


def test_the_run_fixture_has_sizes_cohesion_and_centroids(three_topics):
    licences = proposal(three_topics, "Licences")
    assert licences.size == 6
    assert 0.95 < licences.cohesion <= 1.0
    assert selectors.centroid_of(licences).shape == (16,)


def test_a_rename_is_recorded_and_undone(three_topics, owner):
    licences = proposal(three_topics, "Licences")

    edits.rename_proposal(licences, "  Driving   licences ", user=owner)

    assert Proposal.objects.get(pk=licences.pk).name == "Driving licences"
    action = ReviewAction.objects.get(run=three_topics)
    assert (action.action, action.user, action.summary) == ("rename", owner, "Renamed 'Licences' to 'Driving licences'")

    undone = edits.undo_last(three_topics, user=owner)

    assert undone.pk == action.pk
    assert undone.undone
    assert undone.undone_by == owner
    assert Proposal.objects.get(pk=licences.pk).name == "Licences"
    assert selectors.undoable_action(three_topics) is None


def test_an_empty_name_is_refused_and_nothing_is_recorded(three_topics):
    with pytest.raises(edits.ReviewError, match="needs a name"):
        edits.rename_proposal(proposal(three_topics, "Licences"), "   ")
    assert not ReviewAction.objects.exists()


def test_a_merge_moves_the_queries_and_undo_puts_them_back(three_topics):
    licences, passports, pensions = (proposal(three_topics, n) for n in ("Licences", "Passports", "Pensions"))
    before = {p.pk: members(p) for p in (licences, passports, pensions)}

    edits.merge_proposals(licences, [passports, pensions])

    licences.refresh_from_db()
    passports.refresh_from_db()
    assert licences.size == 12
    assert members(licences) == before[licences.pk] | before[passports.pk] | before[pensions.pk]
    assert (passports.status, passports.merged_into_id, passports.size) == ("merged", licences.pk, 0)
    assert licences.cohesion < 0.8  # three directions in one proposal

    edits.undo_last(three_topics)

    for p in (licences, passports, pensions):
        p.refresh_from_db()
        assert members(p) == before[p.pk]
        assert p.status == "proposed"
        assert p.merged_into_id is None
    assert (licences.size, passports.size, pensions.size) == (6, 4, 2)
    assert licences.cohesion > 0.95


def test_a_merge_needs_two_proposals(three_topics):
    licences = proposal(three_topics, "Licences")
    with pytest.raises(edits.ReviewError, match="at least two"):
        edits.merge_proposals(licences, [licences])


def test_a_discard_is_undone(three_topics):
    pensions = proposal(three_topics, "Pensions")

    edits.discard_proposal(pensions)
    assert Proposal.objects.get(pk=pensions.pk).status == "discarded"

    edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=pensions.pk).status == "proposed"


def test_a_split_reclusters_by_topic_and_undo_restores_the_proposal(make_run):
    run = make_run({
        "Travel": (0, {0: [f"passport renewal {i}" for i in range(5)], 1: [f"visa for japan {i}" for i in range(5)]}),
        "Taxes": (3, [f"income tax return {i}" for i in range(4)]),
    })
    travel = proposal(run, "Travel")
    passport_ids = set(Assignment.objects.filter(run=run, query__text__startswith="passport").values_list("query_id", flat=True))

    children = edits.split_proposal(travel, 2)

    assert len(children) == 2
    assert sorted(c.size for c in children) == [5, 5]
    assert passport_ids in [members(c) for c in children]  # the two topics come apart cleanly
    assert any("passport" in c.keywords or "renewal" in c.keywords for c in children)
    travel.refresh_from_db()
    assert (travel.status, travel.size) == ("split", 0)

    edits.undo_last(run)

    travel.refresh_from_db()
    assert (travel.status, travel.size) == ("proposed", 10)
    assert not Proposal.objects.filter(pk__in=[c.pk for c in children]).exists()


def test_a_split_without_enough_topics_falls_back_to_kmeans(make_run):
    # One topic plus noise: too few topics to group, so KMeans splits the embeddings themselves.
    run = make_run({"Mixed": (0, [f"a {i}" for i in range(3)]), "Other": (6, [f"c {i}" for i in range(3)])},
                   noise={f"b {i}": direction(4, jitter=0.05, seed=i) for i in range(3)}, noise_in="Mixed")

    children = edits.split_proposal(proposal(run, "Mixed"), 2)

    expected = [set(Assignment.objects.filter(run=run, query__text__startswith=p).values_list("query_id", flat=True)) for p in ("a ", "b ")]
    assert sorted((members(c) for c in children), key=min) == sorted(expected, key=min)


def test_a_split_of_a_tiny_proposal_is_refused(three_topics):
    with pytest.raises(edits.ReviewError, match="too few"):
        edits.split_proposal(proposal(three_topics, "Pensions"), 2)


def test_moving_queries_to_another_proposal_is_undone(three_topics):
    licences, passports = proposal(three_topics, "Licences"), proposal(three_topics, "Passports")
    moving = sorted(members(licences))[:2]

    moved = edits.move_queries(three_topics, moving, passports)

    assert moved == 2
    assert set(moving) <= members(passports)
    assert Proposal.objects.get(pk=passports.pk).size == 6

    edits.undo_last(three_topics)

    assert set(moving) <= members(licences)
    assert Proposal.objects.get(pk=licences.pk).size == 6
    assert Proposal.objects.get(pk=passports.pk).size == 4


def test_moving_a_query_out_of_every_proposal_leaves_it_unassigned(three_topics):
    licences = proposal(three_topics, "Licences")
    query_id = min(members(licences))

    edits.move_queries(three_topics, [query_id], None)

    assert Assignment.objects.get(run=three_topics, query_id=query_id).proposal is None
    edits.undo_last(three_topics)
    assert Assignment.objects.get(run=three_topics, query_id=query_id).proposal_id == licences.pk


def test_attach_noise_takes_only_queries_within_the_distance_and_is_undone(three_topics):
    licences = proposal(three_topics, "Licences")

    attached = edits.attach_noise(three_topics, max_distance=0.35)

    assert attached == 1
    near = Assignment.objects.get(run=three_topics, query__text="close to licences")
    far = Assignment.objects.get(run=three_topics, query__text="far from everything")
    assert (near.proposal_id, far.proposal_id) == (licences.pk, None)
    assert Proposal.objects.get(pk=licences.pk).size == 7

    edits.undo_last(three_topics)

    assert Assignment.objects.get(pk=near.pk).proposal_id is None
    assert Proposal.objects.get(pk=licences.pk).size == 6


def test_detach_noise_empties_noise_out_of_proposals_and_is_undone(make_run):
    run = make_run({"Licences": (0, [f"licence {i}" for i in range(4)]), "Passports": (1, [f"passport {i}" for i in range(4)])},
                   noise={"stray one": direction(9), "stray two": direction(10)}, noise_in="Licences")
    licences = proposal(run, "Licences")
    assert licences.size == 6

    assert edits.detach_noise(run) == 2
    assert Proposal.objects.get(pk=licences.pk).size == 4
    assert Assignment.objects.filter(run=run, proposal__isnull=True).count() == 2

    edits.undo_last(run)
    assert Proposal.objects.get(pk=licences.pk).size == 6


def test_undo_walks_back_several_actions_in_reverse_order(three_topics):
    licences, pensions = proposal(three_topics, "Licences"), proposal(three_topics, "Pensions")
    edits.rename_proposal(licences, "Driving")
    edits.discard_proposal(pensions)
    edits.rename_proposal(licences, "Driving licences")

    edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=licences.pk).name == "Driving"
    edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=pensions.pk).status == "proposed"
    edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=licences.pk).name == "Licences"
    with pytest.raises(edits.ReviewError, match="nothing to undo"):
        edits.undo_last(three_topics)


def test_promotion_creates_the_expert_of_the_runs_team_with_its_seed_queries(three_topics, owner, team):
    from experts.models import Expert

    licences = proposal(three_topics, "Licences")

    expert = edits.promote_proposal(licences, "Driving licences", "Renewals and replacements.", seed_queries=["renew my driving licence 0"], user=owner)

    expert = Expert.objects.get(pk=expert.pk)
    assert (expert.slug, expert.name, expert.description, expert.team) == ("driving-licences", "Driving licences", "Renewals and replacements.", team)
    licences.refresh_from_db()
    assert (licences.status, licences.expert_id, licences.seed_queries) == ("promoted", expert.pk, ["renew my driving licence 0"])
    assert ReviewAction.objects.get(action="promote").summary == "Promoted 'Driving licences' to expert 'driving-licences' owned by Reviewers"


def test_a_teams_run_never_promotes_into_another_team(three_topics):
    from django.contrib.auth.models import Group

    from experts.models import Expert

    with pytest.raises(edits.ReviewError, match="belong to its team, Reviewers"):
        edits.promote_proposal(proposal(three_topics, "Licences"), "Driving licences", team=Group.objects.create(name="Licensing desk"))
    assert not Expert.objects.exists()
    assert proposal(three_topics, "Licences").status == "proposed"


def test_a_staff_only_run_promotes_into_the_team_chosen(make_run):
    from django.contrib.auth.models import Group

    run = make_run({"Licences": (0, [f"renew my driving licence {i}" for i in range(4)])}, team=None)
    desk = Group.objects.create(name="Licensing desk")

    expert = edits.promote_proposal(proposal(run, "Licences"), "Driving licences", team=desk)

    assert expert.team == desk


def test_promotion_ends_undo_and_freezes_the_proposal(three_topics):
    licences, passports = proposal(three_topics, "Licences"), proposal(three_topics, "Passports")
    edits.rename_proposal(passports, "Travel documents")
    edits.promote_proposal(licences, "Licences")

    with pytest.raises(edits.ReviewError, match="cannot be undone"):
        edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=passports.pk).name == "Travel documents"
    with pytest.raises(edits.ReviewError, match="promoted"):
        edits.rename_proposal(Proposal.objects.get(pk=licences.pk), "Something else")

    edits.rename_proposal(passports, "Passports again")  # later actions can still be undone, back to the promotion
    edits.undo_last(three_topics)
    assert Proposal.objects.get(pk=passports.pk).name == "Travel documents"


def test_finishing_the_review_promotes_the_rest_into_the_runs_team_and_locks_the_run(three_topics, team):
    from labeling.selectors import routing_examples

    edits.promote_proposal(proposal(three_topics, "Pensions"), "State pensions", "Custom.")
    edits.discard_proposal(proposal(three_topics, "Passports"))

    experts = edits.promote_run(three_topics)

    assert sorted(e.slug for e in experts) == ["licences", "state-pensions"]
    pensions = next(e for e in experts if e.slug == "state-pensions")
    assert pensions.description == "Custom."  # promoted by hand: kept as chosen
    assert {e.team for e in experts} == {team}
    three_topics.refresh_from_db()
    assert three_topics.status == "promoted"
    assert len(routing_examples(three_topics)) == 8
    with pytest.raises(edits.ReviewError, match="has been promoted"):
        edits.rename_proposal(proposal(three_topics, "Licences"), "Late change")
