"""The review queue: which questions it lists, labelling one (training data, once), dismissing, and access."""

from __future__ import annotations

import pytest
from django.urls import reverse

from console import review_queue
from labeling import selectors as labeling_selectors
from labeling.models import Assignment, Query, ReviewDecision
from routing.models import Feedback, RoutingEvent
from tests.factories import make_expert, make_promoted_run, make_team, make_user

pytestmark = pytest.mark.django_db


def event(request_id: str, expert: str, scores: list[float], *, question: str = "", abstained: bool = False, router_version: int | None = 1) -> RoutingEvent:
    slugs = ["dmv", "ssa", "va"]
    return RoutingEvent.objects.create(
        request_id=request_id, mode="auto", expert=expert, router_version=router_version, abstained=abstained,
        experts=[{"slug": s, "score": v} for s, v in zip(slugs, scores, strict=False)], question=question,
    )


@pytest.fixture
def world():
    roads, pensions = make_team("roads"), make_team("pensions")
    dmv = make_expert("dmv", "Motor Vehicles", team=roads, public=False)
    ssa = make_expert("ssa", "Social Security", team=pensions, public=False)
    run = make_promoted_run(dmv, ssa)
    return dmv, ssa, run, make_user("rita", teams=(roads,)), make_user("admin", staff=True)


def test_reasons_come_from_abstention_low_score_small_margin_and_thumbs_down():
    def reasons(e: RoutingEvent, down: bool = False) -> tuple[str, ...]:
        return review_queue.review_reasons(e, down, min_score=0.5, min_margin=0.1)[0]

    assert reasons(event("a", "", [0.3, 0.2], abstained=True)) == ("abstained",)
    assert reasons(event("b", "dmv", [0.45, 0.05])) == ("low_confidence",)
    assert reasons(event("c", "dmv", [0.52, 0.46])) == ("low_confidence",)
    assert reasons(event("d", "dmv", [0.9, 0.05])) == ()
    assert reasons(event("e", "dmv", [0.9, 0.05]), down=True) == ("thumbs_down",)
    assert reasons(event("f", "dmv", [0.2, 0.1], router_version=None)) == ()  # named its expert: not routed


def test_an_answer_whose_documents_point_to_another_expert_is_a_likely_misroute():
    def confident(request_id: str, knowledge: dict) -> RoutingEvent:
        e = event(request_id, "dmv", [0.95, 0.03])
        e.trace = {"evidence": {"routed": True, "views": {"knowledge": knowledge}}}
        return e

    def reasons(e: RoutingEvent) -> tuple[str, ...]:
        return review_queue.review_reasons(e, False, min_score=0.5, min_margin=0.1)[0]

    far = {"dmv": {"best_match": 0.31}, "ssa": {"best_match": 0.62}}
    assert reasons(confident("g", far)) == ("likely_misroute",)
    assert review_queue.primary_reason(("likely_misroute", "low_confidence")) == "likely_misroute"
    assert reasons(confident("h", {"dmv": {"best_match": 0.55}, "ssa": {"best_match": 0.6}})) == ()  # within the gap
    assert reasons(confident("i", {"dmv": {"best_match": 0.62}, "ssa": {"best_match": 0.31}})) == ()  # its own documents match best
    assert reasons(confident("j", {"ssa": {"best_match": 0.62}})) == ()  # the answering expert's evidence unknown
    assert reasons(confident("k", {"unavailable": "store down"})) == ()


def test_the_queue_lists_what_needs_review_newest_first_and_skips_decided_ones(client, world):
    *_, staff = world
    event("confident", "dmv", [0.95, 0.03], question="renew licence")
    event("unsure", "dmv", [0.41, 0.39], question="lost my card")
    event("down", "ssa", [0.9, 0.05], question="pension age")
    Feedback.objects.create(request_id="down", rating=-1, expert="ssa", comment="not helpful")
    event("decided", "dmv", [0.3, 0.2], question="already done")
    ReviewDecision.objects.create(request_id="decided", reason="low_confidence", routed_expert="dmv")
    client.force_login(staff)

    rows = client.get(reverse("console-review")).context["rows"]

    assert [r["item"].event.request_id for r in rows] == ["down", "unsure"]
    assert review_queue.primary_reason(rows[0]["item"].reasons) == "thumbs_down"
    assert rows[0]["item"].feedback_comment == "not helpful"


def test_labelling_a_misroute_feeds_router_training_and_a_double_submit_records_one(client, world):
    _dmv, ssa, run, _member, staff = world
    event("q1", "dmv", [0.45, 0.40], question="When can I draw my pension?")
    client.force_login(staff)

    first = client.post(reverse("console-review"), {"request_id": "q1", "expert": "ssa"})
    second = client.post(reverse("console-review"), {"request_id": "q1", "expert": "dmv"})

    assert first.status_code == second.status_code == 302
    decision = ReviewDecision.objects.get()
    assert (decision.routed_expert, decision.expert, decision.reason, decision.user) == ("dmv", ssa, "low_confidence", staff)
    assert Query.objects.filter(source="review").count() == 1
    examples = labeling_selectors.routing_examples(run)
    assert [(e.text, e.expert) for e in examples] == [("When can I draw my pension?", "ssa")]
    assert client.get(reverse("console-review")).context["rows"] == []


def test_a_label_without_an_expert_comes_back_with_the_message_next_to_the_field(client, world):
    *_, staff = world
    event("q2", "dmv", [0.45, 0.40], question="Where do I register a boat?")
    client.force_login(staff)

    response = client.post(reverse("console-review"), {"request_id": "q2", "expert": ""})

    assert response.status_code == 400
    assert "Choose the expert that should have answered" in response.content.decode()
    assert not ReviewDecision.objects.exists()


def test_dismissing_needs_no_expert_and_adds_no_training_data(client, world):
    *_, staff = world
    event("q3", "", [0.2, 0.1], abstained=True)
    client.force_login(staff)

    client.post(reverse("console-review"), {"request_id": "q3", "expert": "", "dismiss": "on"})

    decision = ReviewDecision.objects.get()
    assert decision.expert is None
    assert decision.reason == "abstained"
    assert not Assignment.objects.exists()


def test_a_team_member_sees_their_and_unanswered_questions_only_and_cannot_label_into_a_hidden_expert(client, world):
    *_, member, _staff = world
    event("mine", "dmv", [0.4, 0.35], question="plates")
    event("theirs", "ssa", [0.4, 0.35], question="pension")
    event("nobody", "", [0.2, 0.1], question="boats", abstained=True)
    client.force_login(member)

    rows = client.get(reverse("console-review")).context["rows"]
    assert {r["item"].event.request_id for r in rows} == {"mine", "nobody"}
    assert [v for v, _ in rows[0]["form"].fields["expert"].choices] == ["", "dmv"]

    assert client.post(reverse("console-review"), {"request_id": "theirs", "expert": "dmv"}).status_code == 404
    assert client.post(reverse("console-review"), {"request_id": "nobody", "expert": "ssa"}).status_code == 400  # not a choice
    assert not ReviewDecision.objects.exists()


def test_an_unknown_request_is_a_404(client, world):
    *_, staff = world
    client.force_login(staff)
    assert client.post(reverse("console-review"), {"request_id": "nope", "expert": "dmv"}).status_code == 404


def test_identical_questions_are_one_row_with_a_count_and_one_label_covers_them_all(client, world):
    *_, staff = world
    event("p1", "dmv", [0.45, 0.40], question="When can I draw my pension?")
    event("p2", "dmv", [0.46, 0.41], question="when can I  draw my pension?")
    event("p3", "dmv", [0.44, 0.42], question="Where do I register a boat?")
    client.force_login(staff)
    rows = client.get(reverse("console-review")).context["rows"]
    assert [r["count"] for r in rows] == [1, 2]  # newest first: the boat, then the pension asked twice
    pension = rows[1]
    assert "asked 2 times" in client.get(reverse("console-review")).content.decode()
    response = client.post(reverse("console-review"), {"request_id": pension["item"].event.request_id, "also": pension["also"], "expert": "ssa"},
                           follow=True)
    assert "and 1 more time it was asked" in response.content.decode()
    assert set(ReviewDecision.objects.values_list("request_id", flat=True)) == {"p1", "p2"}
    assert [r["item"].event.request_id for r in client.get(reverse("console-review")).context["rows"]] == ["p3"]


def test_ticked_questions_are_labelled_together(client, world):
    _dmv, ssa, _run, member, staff = world
    event("b1", "dmv", [0.45, 0.40], question="When can I draw my pension?")
    event("b2", "dmv", [0.45, 0.41], question="How is my pension taxed?")
    event("b3", "dmv", [0.45, 0.42], question="Where do I register a boat?")
    client.force_login(staff)
    nothing = client.post(reverse("console-review"), {"bulk": "1", "expert": "ssa"}, follow=True)
    assert "Select questions" in nothing.content.decode()
    done = client.post(reverse("console-review"), {"bulk": "1", "expert": "ssa", "selected": ["b1", "b2"]}, follow=True)
    assert "Labelled 2 questions for Social Security" in done.content.decode()
    assert sorted(ReviewDecision.objects.filter(expert=ssa).values_list("request_id", flat=True)) == ["b1", "b2"]
    client.force_login(member)  # roads only: cannot bulk-label into pensions
    refused = client.post(reverse("console-review"), {"bulk": "1", "expert": "ssa", "selected": ["b3"]}, follow=True)
    assert "Choose one of your experts." in refused.content.decode()
    assert not ReviewDecision.objects.filter(request_id="b3").exists()


def test_a_follow_up_shows_the_question_asked_before_it_where_the_reviewer_may_see_that_turn(client, world):
    *_, member, staff = world
    for request_id, expert, question, conversation in (("c1-1", "dmv", "How long before I need a New York licence?", "c1"),
                                                       ("c2-1", "ssa", "When can I start my pension?", "c2"),
                                                       ("c1-2", "", "Is it possible to do it online?", "c1"),
                                                       ("c2-2", "", "Is it possible to do it online?", "c2")):
        e = event(request_id, expert, [0.9, 0.05] if expert else [0.2, 0.1], question=question, abstained=not expert)
        RoutingEvent.objects.filter(pk=e.pk).update(conversation_id=conversation)
    client.force_login(staff)
    response = client.get(reverse("console-review"))
    page = response.content.decode()
    assert "Follow-up to “How long before I need a New York licence?”" in page
    assert "Follow-up to “When can I start my pension?”" in page
    # The same follow-up after another question asks something else: two rows, not one "asked 2 times".
    assert [r["count"] for r in response.context["rows"] if r["item"].event.question.startswith("Is it")] == [1, 1]

    client.force_login(member)  # roads sees its own expert's turn, not the pension team's
    page = client.get(reverse("console-review")).content.decode()
    assert "Follow-up to “How long before I need a New York licence?”" in page
    assert "When can I start my pension?" not in page
