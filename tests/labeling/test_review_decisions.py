"""Review-queue decisions become router training data: one per request id, in the latest promoted run."""

from __future__ import annotations

import pytest

from labeling import proposals as edits
from labeling import selectors, services
from labeling.models import Assignment, Query, ReviewDecision
from tests.factories import make_expert, make_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def promoted(three_topics):
    """The three-topic run promoted to experts (licences, passports, pensions by slug)."""
    experts = edits.promote_run(three_topics)
    return three_topics, {e.name: e for e in experts}


def test_a_label_becomes_a_routing_example_of_the_chosen_expert(promoted, owner):
    run, experts = promoted
    passports = experts["Passports"]
    before = len(selectors.routing_examples(run))

    decision, created = services.record_review_decision(
        "chatcmpl-1", "  How do I  renew a passport abroad? ", "low_confidence", "licences", passports, user=owner,
    )

    assert created
    assert decision.expert == passports
    assert decision.routed_expert == "licences"
    assert decision.is_misroute
    examples = selectors.routing_examples(run)
    assert len(examples) == before + 1
    added = [e for e in examples if e.query_id == decision.query_id]
    assert added[0].text == "How do I renew a passport abroad?"
    assert added[0].expert == passports.slug
    assert added[0].split == "train"
    query = Query.objects.get(pk=decision.query_id)
    assert (query.source, query.label) == ("review", passports.slug)


def test_a_double_submit_records_one_decision_and_one_query(promoted):
    _run, experts = promoted
    first, created_first = services.record_review_decision("chatcmpl-2", "pension age?", "thumbs_down", "licences", experts["Pensions"])
    second, created_second = services.record_review_decision("chatcmpl-2", "pension age?", "thumbs_down", "licences", experts["Passports"])

    assert created_first
    assert not created_second
    assert second.pk == first.pk
    assert second.expert == experts["Pensions"]
    assert ReviewDecision.objects.count() == 1
    assert Query.objects.filter(source="review").count() == 1


def test_dismissing_records_a_decision_without_training_data(promoted):
    decision, created = services.record_review_decision("chatcmpl-3", "", "abstained", "", None)

    assert created
    assert decision.expert is None
    assert decision.query is None
    assert not Query.objects.filter(source="review").exists()


def test_a_label_needs_question_text_and_a_promoted_run(three_topics):
    expert = make_expert("roads", "Roads", public=False)
    with pytest.raises(edits.ReviewError, match="no stored question text"):
        services.record_review_decision("chatcmpl-4", "  ", "low_confidence", "", expert)
    with pytest.raises(edits.ReviewError, match="no promoted clustering run"):
        services.record_review_decision("chatcmpl-4", "Where do I pay road tax?", "low_confidence", "", expert)
    assert not ReviewDecision.objects.exists()


def test_an_expert_without_a_proposal_in_the_run_gets_one_so_the_router_can_learn_it(promoted):
    run, _experts = promoted
    roads = make_expert("roads", "Roads", team=run.team, public=False)  # a label goes to a run of the expert's own team

    decision, _ = services.record_review_decision("chatcmpl-5", "Where do I pay road tax?", "abstained", "", roads)

    assignment = Assignment.objects.get(run=run, query=decision.query)
    assert assignment.proposal.expert == roads
    assert assignment.proposal.status == "promoted"
    assert "roads" in {e.expert for e in selectors.routing_examples(run)}


def test_a_label_never_lands_in_another_teams_run(promoted):

    run, _experts = promoted
    elsewhere = make_expert("payroll", "Payroll", team=make_team("Another team"), public=False)
    with pytest.raises(edits.ReviewError, match="no promoted clustering run holds Payroll"):
        services.record_review_decision("chatcmpl-6", "When is payday?", "abstained", "", elsewhere)
    assert not Assignment.objects.filter(run=run, proposal__expert=elsewhere).exists()
