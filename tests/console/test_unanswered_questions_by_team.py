"""Questions no expert answered belong to the teams of their candidate experts: traces, the review queue,
labelling and dismissing them, and the recent decisions, between two teams."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling.models import Query, ReviewDecision
from routing.models import Feedback, RoutingEvent
from tests.factories import make_expert, make_promoted_run, make_team, make_user

pytestmark = pytest.mark.django_db

SECRET = "MARKER-B-7f3a where is the pension vault"


def unanswered(request_id: str, candidates: list[str], *, question: str = SECRET, **fields) -> RoutingEvent:
    return RoutingEvent.objects.create(
        request_id=request_id, mode="auto", expert="", router_version=1, abstained=True, question=question,
        experts=[{"slug": s, "score": 0.2 - i / 100} for i, s in enumerate(candidates)], **fields,
    )


@pytest.fixture
def teams():
    """Team A (roads: ``dmv``) and team B (pensions: ``ssa``), a member of each, staff, and a promoted run to label into."""
    roads, pensions = make_team("roads"), make_team("pensions")
    make_promoted_run(make_expert("dmv", "Motor Vehicles", team=roads, public=False), make_expert("ssa", "Social Security", team=pensions, public=False))
    return make_user("ana", teams=(roads,)), make_user("bob-of-pensions", teams=(pensions,)), make_user("admin", staff=True)


def test_another_teams_unanswered_question_is_not_in_my_traces_or_on_its_trace_page(client, teams):
    ana, bob, staff = teams
    unanswered("b-q", ["ssa"])

    client.force_login(ana)
    assert SECRET not in client.get(reverse("console-traces")).content.decode()
    assert SECRET not in client.get(reverse("console-traces"), {"expert": "-"}).content.decode()
    assert client.get(reverse("console-trace", args=["b-q"])).status_code == 404

    for user in (bob, staff):
        client.force_login(user)
        assert SECRET in client.get(reverse("console-traces")).content.decode()
        assert client.get(reverse("console-trace", args=["b-q"])).status_code == 200


def test_an_unanswered_question_shows_to_each_team_among_its_candidates_fallback_and_failover(client, teams):
    ana, bob, staff = teams
    unanswered("both", ["ssa", "dmv"])
    unanswered("failed-over", [], failover_from=[{"slug": "dmv", "reason": "circuit_open"}])
    unanswered("fallback", [], trace={"evidence": {"routed": True, "abstained": True, "fallback": "dmv"}})
    unanswered("nobody", [])

    client.force_login(ana)
    listed = {row["event"].request_id for row in client.get(reverse("console-traces")).context["rows"]}
    assert listed == {"both", "failed-over", "fallback"}
    client.force_login(bob)
    assert {row["event"].request_id for row in client.get(reverse("console-traces")).context["rows"]} == {"both"}
    assert client.get(reverse("console-trace", args=["nobody"])).status_code == 404  # no candidate: staff only
    client.force_login(staff)
    assert len(client.get(reverse("console-traces")).context["rows"]) == 4


def test_another_teams_unanswered_question_is_not_in_my_review_queue(client, teams):
    ana, bob, _staff = teams
    unanswered("b-q", ["ssa"])
    unanswered("a-q", ["dmv"], question="Where do I renew my licence?")

    client.force_login(ana)
    page = client.get(reverse("console-review"))
    assert [r["item"].event.request_id for r in page.context["rows"]] == ["a-q"]
    assert SECRET not in page.content.decode()

    client.force_login(bob)
    assert [r["item"].event.request_id for r in client.get(reverse("console-review")).context["rows"]] == ["b-q"]


def test_i_cannot_label_or_dismiss_another_teams_unanswered_question_however_i_post_it(client, teams):
    ana, _bob, _staff = teams
    unanswered("b-q", ["ssa"])
    unanswered("a-q", ["dmv"], question="Where do I renew my licence?")
    client.force_login(ana)

    assert client.post(reverse("console-review"), {"request_id": "b-q", "expert": "dmv"}).status_code == 404
    assert client.post(reverse("console-review"), {"request_id": "b-q", "expert": "", "dismiss": "on"}).status_code == 404
    # Riding along as "the same question asked again", or ticked in a bulk label, changes nothing of B's either.
    assert client.post(reverse("console-review"), {"request_id": "a-q", "also": "b-q", "expert": "dmv"}).status_code == 302
    assert client.post(reverse("console-review"), {"bulk": "1", "expert": "dmv", "selected": ["b-q"]}).status_code == 302

    assert list(ReviewDecision.objects.values_list("request_id", flat=True)) == ["a-q"]
    assert not Query.objects.filter(text__contains="MARKER-B").exists()  # nothing of B's became training data


def test_a_shared_question_is_labelled_only_to_an_expert_i_may_change_and_dismissed_only_by_its_teams(client, teams):
    ana, _bob, _staff = teams
    make_expert("faq", "General FAQ", public=False)  # no team: everyone sees it, staff change it
    unanswered("shared", ["ssa", "dmv"], question="Is my car part of my pension?")
    answered_by_faq = RoutingEvent.objects.create(request_id="faq-q", mode="auto", expert="faq", router_version=1, question="Opening hours?",
                                                  experts=[{"slug": "faq", "score": 0.41}, {"slug": "dmv", "score": 0.39}])
    client.force_login(ana)

    rows = client.get(reverse("console-review")).context["rows"]
    assert {r["item"].event.request_id for r in rows} == {"shared", "faq-q"}
    assert [v for v, _ in rows[0]["form"].fields["expert"].choices] == ["", "dmv"]  # only what she may change
    assert client.post(reverse("console-review"), {"request_id": "shared", "expert": "ssa"}).status_code == 400
    assert client.post(reverse("console-review"), {"request_id": "shared", "expert": "faq"}).status_code == 400
    assert client.post(reverse("console-review"), {"request_id": "faq-q", "expert": "", "dismiss": "on"}).status_code == 403
    assert not ReviewDecision.objects.exists()

    assert client.post(reverse("console-review"), {"request_id": "shared", "expert": "", "dismiss": "on"}).status_code == 302
    assert client.post(reverse("console-review"), {"request_id": answered_by_faq.request_id, "expert": "dmv"}).status_code == 302
    assert dict(ReviewDecision.objects.values_list("request_id", "expert__slug")) == {"shared": None, "faq-q": "dmv"}


def test_recent_decisions_show_neither_another_teams_questions_labels_nor_reviewers(client, teams):
    ana, bob, staff = teams
    unanswered("b-q", ["ssa"])
    unanswered("shared", ["ssa", "dmv"], question="Is my car part of my pension?")
    client.force_login(bob)
    assert client.post(reverse("console-review"), {"request_id": "b-q", "expert": "ssa"}).status_code == 302
    assert client.post(reverse("console-review"), {"request_id": "shared", "expert": "", "dismiss": "on"}).status_code == 302

    client.force_login(ana)
    page = client.get(reverse("console-review"))
    body = page.content.decode()
    assert [r.decision.request_id for r in page.context["recent"]] == ["shared"]
    assert "MARKER-B" not in body
    assert "bob-of-pensions" not in body
    assert "another team" in body

    client.force_login(staff)
    body = client.get(reverse("console-review")).content.decode()
    assert "MARKER-B" in body
    assert "bob-of-pensions" in body


def test_a_wrong_expert_report_names_only_an_expert_i_may_see_and_another_teams_report_is_not_shown(client, teams):
    ana, bob, _staff = teams
    RoutingEvent.objects.create(request_id="a-ans", mode="auto", expert="dmv", router_version=1, question="Plates?",
                                experts=[{"slug": "dmv", "score": 0.9}])
    unanswered("shared", ["ssa", "dmv"], question="Is my car part of my pension?")
    client.force_login(ana)

    refused = client.post(reverse("console-trace-feedback", args=["a-ans"]), {"verdict": "wrong_expert", "right_expert": "ssa"}, follow=True)
    assert "Select a valid choice" in refused.content.decode()
    assert not Feedback.objects.exists()

    client.force_login(bob)
    client.post(reverse("console-trace-feedback", args=["shared"]), {"verdict": "wrong_expert", "right_expert": "ssa", "comment": "ours"},
                follow=True)
    assert Feedback.objects.get(request_id="shared").suggested_expert == "ssa"

    client.force_login(ana)
    trace = client.get(reverse("console-trace", args=["shared"])).content.decode()
    assert "wrong expert: should have gone to" not in trace
    assert "Social Security" not in trace
    row = next(r for r in client.get(reverse("console-review")).context["rows"] if r["item"].event.request_id == "shared")
    assert row["item"].suggested_expert == ""
    assert row["form"].initial["expert"] == ""
