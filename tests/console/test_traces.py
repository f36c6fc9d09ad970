"""Traces: the request log's filters, one request explained, and who may see which."""

from __future__ import annotations

import dataclasses
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from experts.models import Expert
from routing.models import Feedback, RoutingEvent
from serving import traces
from serving.route import Decision
from tests.factories import make_user, roads_and_pensions

pytestmark = pytest.mark.django_db


def event(request_id: str, expert: str, *, question: str = "", abstained: bool = False, trace: dict | None = None, **fields) -> RoutingEvent:
    fields.setdefault("experts", [{"slug": "dmv", "score": 0.8}, {"slug": "ssa", "score": 0.15}])
    return RoutingEvent.objects.create(
        request_id=request_id, mode="auto", expert=expert, router_version=3, abstained=abstained, question=question,
        trace=trace or {}, total_ms=42.0, **fields,
    )


@pytest.fixture
def world():
    roads, _ = roads_and_pensions()
    return make_user("rita", teams=(roads,)), make_user("admin", staff=True)


def ids(response) -> list[str]:
    return [row["event"].request_id for row in response.context["rows"]]


def test_the_trace_list_filters_by_expert_outcome_feedback_question_and_date(client, world):
    _, staff = world
    event("r-plates", "dmv", question="Where do I order plates?")
    event("r-pension", "ssa", question="When does my pension start?", answer_source="extractive_fallback")
    event("r-none", "", question="What is the weather?", abstained=True)
    old = event("r-old", "dmv", question="An old plates question")
    RoutingEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=10))
    Feedback.objects.create(request_id="r-plates", rating=-1, expert="dmv")
    client.force_login(staff)
    url = reverse("console-traces")
    assert ids(client.get(url)) == ["r-none", "r-pension", "r-plates", "r-old"]
    assert ids(client.get(url, {"expert": "dmv"})) == ["r-plates", "r-old"]
    assert ids(client.get(url, {"expert": "-"})) == ["r-none"]
    assert ids(client.get(url, {"outcome": "abstained"})) == ["r-none"]
    assert ids(client.get(url, {"outcome": "fallback"})) == ["r-pension"]
    assert ids(client.get(url, {"feedback": "down"})) == ["r-plates"]
    assert ids(client.get(url, {"feedback": "none", "q": "plates"})) == ["r-old"]
    assert ids(client.get(url, {"period": "7d", "q": "PLATES"})) == ["r-plates"]
    bad = client.get(url, {"experiment": "zero"})
    assert bad.status_code == 400
    assert "Enter a whole number" in bad.content.decode()


def test_a_team_member_sees_only_their_experts_traces_and_unanswered_ones(client, world):
    member, _ = world
    event("r-plates", "dmv", question="Where do I order plates?")
    event("r-pension", "ssa", question="When does my pension start?")
    event("r-none", "", question="What is the weather?", abstained=True)
    client.force_login(member)
    assert ids(client.get(reverse("console-traces"))) == ["r-none", "r-plates"]
    assert ids(client.get(reverse("console-traces"), {"expert": "ssa"})) == []  # not a choice of theirs: the form says so
    assert client.get(reverse("console-trace", args=["r-pension"])).status_code == 404
    assert client.get(reverse("console-trace", args=["r-plates"])).status_code == 200


def test_an_abstention_is_explained_with_its_score_threshold_and_the_expert_it_would_have_chosen(client, world):
    _, staff = world
    decision = Decision(experts=[{"slug": "dmv", "score": 0.41}, {"slug": "ssa", "score": 0.3}], router_version=3, embed_ms=1, route_ms=1,
                        abstained=True, raw_scores={"dmv": 0.41, "ssa": 0.3}, score=0.21, threshold=0.325)
    trace = traces.build(decision, None)
    assert trace["evidence"] == {"routed": True, "score": 0.21, "threshold": 0.325, "abstained": True, "would_have_chosen": "dmv", "fallback": None,
                                 "encoder": "full"}
    event("r-none", "", question="What is the weather?", abstained=True, trace=trace, answer_source="none")
    client.force_login(staff)
    page = client.get(reverse("console-trace", args=["r-none"])).content.decode()
    assert "its in-scope score 0.21 was below the 0.33 needed to route it" in page
    assert "It would have chosen <strong>Motor Vehicles</strong>" in page  # the expert by its name, not its slug
    assert 'id="router-views"' not in page  # a decision without the spelling view says nothing of views
    assert "What is the weather?" in page


@pytest.mark.parametrize(("examples", "expected"), [
    ({"expert": "ssa", "similarity": 0.8312}, "the training questions most like it were <strong>Social Security</strong>'s (similarity 0.83)."),
    (None, "by its words' spelling, <strong>Motor Vehicles</strong> (0.70)."),
])
def test_a_trace_says_what_each_view_of_the_question_favoured(client, world, examples, expected):
    _, staff = world
    views = {"meaning": {"expert": "dmv", "probability": 0.6}, "spelling": {"expert": "dmv", "probability": 0.7}, "spelling_weight": 0.4}
    if examples:
        views["examples"] = examples
    decision = Decision(experts=[{"slug": "dmv", "score": 0.6}, {"slug": "ssa", "score": 0.3}], router_version=3, embed_ms=1, route_ms=1,
                        raw_scores={"dmv": 0.6, "ssa": 0.3}, score=0.9, threshold=0.3, views=views)
    event("r-views", "dmv", question="renew my licence", trace=traces.build(decision, None))
    client.force_login(staff)
    page = client.get(reverse("console-trace", args=["r-views"])).content.decode()
    found = page.split('id="router-views"')[1].split("</p>")[0]
    assert "By meaning it looked like <strong>Motor Vehicles</strong> (0.60)" in found
    assert expected in found
    assert ("training questions most like it" in found) == bool(examples)


def test_a_trace_names_the_word_that_kept_the_question_in_scope_and_whose_documents_use_it(client, world):
    _, staff = world
    knowledge = {"dmv": {"best_match": 0.31, "keyword_score": 2.0}, "ssa": {"best_match": None, "keyword_score": None},
                 "va": {"word": "dd214", "jargon": 10.1}}  # the word's expert was no candidate: only its word
    decision = Decision(experts=[{"slug": "dmv", "score": 0.6}, {"slug": "ssa", "score": 0.3}], router_version=3, embed_ms=1, route_ms=1,
                        raw_scores={"dmv": 0.6, "ssa": 0.3}, score=1.4, threshold=1.2, views={"knowledge": knowledge})
    event("r-word", "dmv", question="where do I send my DD214?", trace=traces.build(decision, None))
    client.force_login(staff)
    found = client.get(reverse("console-trace", args=["r-word"])).content.decode().split('id="router-knowledge"')[1].split("</ul>")[0]
    assert "<strong>Motor Vehicles</strong>: closest passage 0.31, keyword match 2.0</li>" in found
    assert "<strong>Social Security</strong>: no documents</li>" in found
    assert "<strong>va</strong>: <span class=\"jargon\">its documents use “dd214”, which the others' rarely do (weight 10.1)</span></li>" in found


def test_a_trace_keeps_the_passages_with_what_was_cited_and_the_answer_only_when_text_is_stored(settings):
    from serving.chat import ChatResult

    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    passages = [{"index": 1, "title": "Renewals", "expert": "dmv", "document_id": 7, "chunk_id": "a", "score": 0.7, "text": "Renew online."},
                {"index": 2, "title": "Plates", "expert": "dmv", "document_id": 8, "chunk_id": "b", "score": 0.5, "text": "Order plates."}]
    result = ChatResult(answer="Renew online [1].", expert="dmv", decision=decision, citations=passages[:1], passages=passages, grounded=True,
                        mode="auto", timings={}, request_id="r")
    settings.STORE_QUESTION_TEXT = False
    trace = traces.build(decision, result)
    assert [(p["title"], p["cited"]) for p in trace["passages"]] == [("Renewals", True), ("Plates", False)]
    assert "text" not in trace["passages"][0]  # the document is linked, its text not copied
    assert "answer" not in trace
    assert trace["evidence"]["abstained"] is False
    settings.STORE_QUESTION_TEXT = True
    assert traces.build(decision, result)["answer"] == "Renew online [1]."


def test_a_spell_corrected_search_is_on_the_trace_with_its_words_only_when_text_is_stored(client, world, settings):
    from serving.chat import ChatResult

    _, staff = world
    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    spelling = {"searched_for": "renew my driver license", "corrections": [["renw", "renew"], ["drivr", "driver"]]}
    result = ChatResult(answer="Renew online.", expert="dmv", decision=decision, citations=[], passages=[], grounded=True, mode="auto",
                        timings={}, request_id="r", spelling=spelling)
    settings.STORE_QUESTION_TEXT = False
    assert traces.build(decision, result)["spelling"] == {"corrected_words": 2}
    event("r-words", "dmv", trace=traces.build(decision, result))
    settings.STORE_QUESTION_TEXT = True
    event("r-text", "dmv", trace=traces.build(decision, result))
    client.force_login(staff)
    hidden = client.get(reverse("console-trace", args=["r-words"])).content.decode()
    assert "2 misspelt words corrected" in hidden
    assert "drivr" not in hidden
    shown = client.get(reverse("console-trace", args=["r-text"])).content.decode()
    assert "Searched for “renew my driver license”" in shown
    assert "drivr → driver" in shown


def test_a_follow_up_searched_with_the_conversation_says_so_on_its_trace(client, world):
    from serving.chat import ChatResult

    _, staff = world
    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    result = ChatResult(answer="It costs 64 dollars.", expert="dmv", decision=decision, citations=[], passages=[], grounded=True, mode="auto",
                        timings={}, request_id="r", earlier_turns_searched=2)
    event("r-follow", "dmv", trace=traces.build(decision, result))
    event("r-first", "dmv", trace=traces.build(decision, dataclasses.replace(result, earlier_turns_searched=0)))
    event("r-shift", "dmv", trace=traces.build(decision, dataclasses.replace(result, earlier_turns_searched=0, earlier_turns_left_out=1)))
    client.force_login(staff)
    assert "Searched with the user's 2 earlier questions in this conversation" in client.get(reverse("console-trace", args=["r-follow"])).content.decode()
    shifted = client.get(reverse("console-trace", args=["r-shift"])).content.decode()
    assert "Searched with this question alone" in shifted
    assert "it may start a new subject, and the user's 1 earlier question in this conversation was left out" in shifted
    assert 'id="trace-conversation"' not in client.get(reverse("console-trace", args=["r-first"])).content.decode()


def test_a_wrong_expert_report_on_a_trace_lands_in_the_review_queue_with_the_right_label_proposed(client, world):
    member, _ = world
    Expert.objects.filter(slug="ssa").update(team=None)  # visible to the member too
    event("r-pension", "dmv", question="When does my pension start?")
    client.force_login(member)
    url = reverse("console-trace-feedback", args=["r-pension"])
    missing = client.post(url, {"verdict": "wrong_expert"}, follow=True)
    assert "Choose the expert that should have answered." in missing.content.decode()
    assert not Feedback.objects.exists()  # nothing half-written
    done = client.post(url, {"verdict": "wrong_expert", "right_expert": "ssa", "comment": "pensions are ssa"}, follow=True)
    assert "Reported: it should have gone to Social Security." in done.content.decode()
    feedback = Feedback.objects.get(request_id="r-pension")
    assert (feedback.rating, feedback.suggested_expert, feedback.expert) == (-1, "ssa", "dmv")
    queue = client.get(reverse("console-review"))
    row = next(r for r in queue.context["rows"] if r["item"].event.request_id == "r-pension")
    assert row["item"].suggested_expert == "ssa"
    assert row["form"].initial["expert"] == "ssa"  # proposed: one click labels it
    assert "it should have gone to <strong>Social Security</strong>" in queue.content.decode()
    assert client.post(reverse("console-trace-feedback", args=["r-pension"]), {"verdict": "up"}).status_code == 302
    assert Feedback.objects.get(request_id="r-pension").rating == 1  # a second verdict replaces the first


def test_feedback_on_another_teams_trace_is_not_found(client, world):
    member, _ = world
    event("r-ssa", "ssa", question="When does my pension start?")
    client.force_login(member)
    assert client.post(reverse("console-trace-feedback", args=["r-ssa"]), {"verdict": "down"}).status_code == 404
    assert not Feedback.objects.exists()


def test_a_heatmap_cell_links_to_the_traces_of_its_hour(client, world):
    _, staff = world
    now = timezone.now()
    event("r-in", "dmv", question="Plates?")
    outside = event("r-out", "dmv", question="Older plates?")
    RoutingEvent.objects.filter(pk=outside.pk).update(created_at=now - timedelta(hours=5))
    client.force_login(staff)
    heatmap = client.get(reverse("console-heatmap"), {"window": "24h"})
    link = [a for a in heatmap.content.decode().split('href="')[1:] if a.startswith("/traces/?expert=dmv")][-1]  # the current hour's
    url = link.split('"')[0].replace("&amp;", "&")
    response = client.get(url)
    assert response.status_code == 200
    assert ids(response) == ["r-in"]  # only the cell's hour
    assert 'id="trace-span"' in response.content.decode()


def test_a_trace_opened_right_after_its_answer_is_found_though_events_are_written_in_batches(client, world, settings):
    from serving import events

    _, staff = world
    settings.EVENTS_SYNC = False  # as in a running server: the event waits in the writer's buffer
    events.record(request_id="r-now", mode="auto", expert="dmv", question="Plates?", experts=[{"slug": "dmv", "score": 0.9}])
    client.force_login(staff)
    assert client.get(reverse("console-trace", args=["r-now"])).status_code == 200


def test_the_trace_says_which_sentence_the_answer_quoted_why_and_the_runner_up_with_text_only_when_stored(client, world, settings):
    from serving.chat import ChatResult

    _, staff = world
    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    selection = {"quoted": [{"passage": 1, "sentence": 2, "score": 2.41, "text": "Yes, renew online in ten minutes.",
                             "reasons": ["follows a question", "uses the question's own words"]}],
                 "runner_up": {"passage": 2, "sentence": 1, "score": 1.87, "text": "Offices open at nine."}, "candidates": 7}
    result = ChatResult(answer="Yes, renew online in ten minutes. [1]", expert="dmv", decision=decision, citations=[], passages=[], grounded=True,
                        mode="auto", timings={}, request_id="r", selection=selection)
    settings.STORE_QUESTION_TEXT = False
    kept = traces.build(decision, result)["selection"]
    assert kept["quoted"][0]["reasons"] == ["follows a question", "uses the question's own words"]
    assert "text" not in kept["quoted"][0]
    assert "text" not in kept["runner_up"]
    event("s-words", "dmv", trace=traces.build(decision, result))
    settings.STORE_QUESTION_TEXT = True
    event("s-text", "dmv", trace=traces.build(decision, result))
    client.force_login(staff)
    hidden = client.get(reverse("console-trace", args=["s-words"])).content.decode()
    assert "Quoted sentence 2 of passage 1: follows a question, uses the question&#x27;s own words." in hidden
    assert "Next best of 7 sentences: sentence 1 of passage 2 (score 1.87 against 2.41)." in hidden
    assert "Offices open at nine" not in hidden
    shown = client.get(reverse("console-trace", args=["s-text"])).content.decode()
    assert "(score 1.87 against 2.41): “Offices open at nine.”</p>" in shown


def test_a_trace_says_when_the_light_router_chose(client, world):
    _, staff = world
    fast = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=0.05, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95,
                    threshold=0.3, encoder="fast")
    full = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=9, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    assert traces.build(fast, None)["evidence"]["encoder"] == "fast"
    event("r-fast", "dmv", trace=traces.build(fast, None))
    event("r-full", "dmv", trace=traces.build(full, None))
    client.force_login(staff)
    assert "Routed by the light router (auto:fast)" in client.get(reverse("console-trace", args=["r-fast"])).content.decode()
    assert "light router" not in client.get(reverse("console-trace", args=["r-full"])).content.decode()
    fast.degraded = "sentence encoder unavailable: the encoder process exited"
    event("r-degraded", "dmv", trace=traces.build(fast, None))
    assert "The sentence model was unavailable, so the light router chose" in client.get(reverse("console-trace", args=["r-degraded"])).content.decode()


def test_a_follow_up_ranked_with_its_conversation_says_so_on_its_trace(client, world):
    _, staff = world
    alone = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    blended = dataclasses.replace(alone, conversation={"earlier_turns": 2, "question_alone": {"expert": "ssa", "probability": 0.55}, "weight": 3.0})
    event("r-blended", "dmv", trace=traces.build(blended, None))
    event("r-alone", "dmv", trace=traces.build(alone, None))
    client.force_login(staff)
    shown = client.get(reverse("console-trace", args=["r-blended"])).content.decode()
    assert "Ranked with the user's 2 earlier questions in this conversation: on its own this question was unsure" in shown
    assert "closest to <strong>Social Security</strong>, 0.55" in shown
    assert 'id="router-conversation"' not in client.get(reverse("console-trace", args=["r-alone"])).content.decode()
    assert "rules out" not in shown
    ruled = dataclasses.replace(blended, conversation={**blended.conversation, "ruled_out": {"expert": "va", "probability_alone": 0.004}})
    event("r-ruled", "dmv", trace=traces.build(ruled, None))
    shown = client.get(reverse("console-trace", args=["r-ruled"])).content.decode()
    assert "The conversation pointed to <strong>va</strong>, which this question on its own rules out (0.00)" in shown


def test_an_answer_kept_with_the_conversations_expert_says_so_on_its_trace(client, world, monkeypatch):
    from routing.ml import conversation as conversation_rule
    from serving.chat import ChatResult

    _, staff = world
    monkeypatch.setattr(conversation_rule, "STICKY_MARGIN", 0.15)
    decision = Decision(experts=[{"slug": "ssa", "score": 0.6}, {"slug": "dmv", "score": 0.4}], router_version=3, embed_ms=1, route_ms=1,
                        raw_scores={"ssa": 0.6, "dmv": 0.4}, score=0.95, threshold=0.3)
    result = ChatResult(answer="...", expert="dmv", decision=decision, citations=[], passages=[], grounded=True, mode="auto", timings={},
                        request_id="r", sticky=True, conversation_expert="dmv", conversation_expert_from="earlier_questions")
    event("r-kept", "dmv", trace=traces.build(decision, result))
    event("r-free", "ssa", trace=traces.build(decision, dataclasses.replace(result, sticky=False)))
    abstained = dataclasses.replace(decision, abstained=True)
    event("r-stayed", "dmv", abstained=True, trace=traces.build(abstained, dataclasses.replace(result, conversation_expert_from="stored")))
    client.force_login(staff)
    kept = client.get(reverse("console-trace", args=["r-kept"])).content.decode()
    assert "It stayed with the conversation's expert <strong>Motor Vehicles</strong>: no other expert scored more than 0.15 higher" in kept
    assert "the expert the user's earlier messages route to" in kept
    stayed = client.get(reverse("console-trace", args=["r-stayed"])).content.decode()
    assert "The router placed this question with no expert, so it stayed with the conversation's expert <strong>Motor Vehicles</strong>." in stayed
    assert 'id="router-kept"' not in client.get(reverse("console-trace", args=["r-free"])).content.decode()


def test_the_console_names_the_experts_a_user_may_see_and_shows_other_slugs_as_recorded(world):
    from console.templatetags.expert_names import expert_name
    from experts.access import visible_names

    roads_member, staff = world
    assert visible_names(staff) == {"dmv": "Motor Vehicles", "ssa": "Social Security"}
    names = visible_names(roads_member)
    assert names == {"dmv": "Motor Vehicles"}  # ssa belongs to another team
    assert expert_name("dmv", names) == "Motor Vehicles"
    assert expert_name("ssa", names) == "ssa"  # another team's expert keeps its name to that team
    assert expert_name("retired", names) == "retired"  # no such expert (any more): its slug, as recorded
    assert expert_name("", names) == expert_name(None, names) == ""
    assert expert_name("dmv") == "dmv"  # a template without the names shows slugs
    assert visible_names(None) == {}


def test_the_trace_list_gives_the_answering_experts_own_score_and_says_when_it_was_not_the_routers_first_choice(client, world):
    _, staff = world
    event("r-first", "dmv", question="renew my licence")
    event("r-second", "ssa", question="a question whose passage came from the second expert")
    event("r-none", "", question="What is the weather?", abstained=True)
    event("r-both", "dmv", question="renew my licence and start my pension", trace={"experts_answering": ["dmv", "ssa"], "answer": "long " * 500})
    client.force_login(staff)
    response = client.get(reverse("console-traces"))
    rows = {row["event"].request_id: row for row in response.context["rows"]}

    assert (rows["r-first"]["top"], rows["r-first"]["rank"]) == (0.8, 1)
    assert (rows["r-second"]["top"], rows["r-second"]["rank"]) == (0.15, 2)  # its own score, not the router's top one
    assert rows["r-none"]["rank"] is None
    page = response.content.decode()
    assert page.count("router's second choice") == 1
    assert 'title="the router\'s first choice was Motor Vehicles"' in page
    # An answer made of two experts' parts names both, not only the first part's expert; the rows' traces are not loaded for it.
    assert [row["answered_by"] for row in response.context["rows"]] == [["dmv", "ssa"], [], ["ssa"], ["dmv"]]
    assert '<td class="wide" data-label="Answered by">Motor Vehicles and Social Security</td>' in page
    assert all("trace" in row["event"].get_deferred_fields() for row in response.context["rows"])


def test_the_trace_gives_each_cited_passage_the_number_the_answer_cites_it_by(client, world):
    from serving.chat import ChatResult

    _, staff = world
    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    passages = [{"index": i, "title": title, "expert": "dmv", "document_id": i, "chunk_id": str(i), "score": 0.9 - i / 10, "text": "t"}
                for i, title in enumerate(["Fees", "Plates", "Renewals"], start=1)]
    # The extractive answer cites its best sentence's passage (the third retrieved) first, then the first.
    selection = {"quoted": [{"passage": 3, "sentence": 4, "score": 2.1, "text": "Renew online.", "reasons": ["answers the question"]}],
                 "runner_up": {"passage": 2, "sentence": 1, "score": 1.2, "text": "Plates."}, "candidates": 9}
    result = ChatResult(answer="Renew online. [1] It costs $30. [2]", expert="dmv", decision=decision, citations=[passages[2], passages[0]],
                        passages=passages, grounded=True, mode="auto", timings={}, request_id="r", selection=selection)
    event("r-marks", "dmv", trace=traces.build(decision, result))
    client.force_login(staff)
    response = client.get(reverse("console-trace", args=["r-marks"]))
    page = response.content.decode()

    assert [(p["title"], p["mark"]) for p in response.context["passages"]] == [("Fees", 2), ("Plates", None), ("Renewals", 1)]
    assert "Quoted sentence 4 of passage 3, cited as [1]: answers the question." in page
    assert page.count(">cited as [1]</span>") == page.count(">cited as [2]</span>") == 1
    assert page.index("Fees") < page.index(">cited as [2]<") < page.index("Renewals") < page.index(">cited as [1]<")


def test_the_trace_gives_no_citation_numbers_it_cannot_know():
    from console.traces import citation_marks

    two = [{"index": 1, "cited": True}, {"index": 2, "cited": False}, {"index": 3, "cited": True}]
    assert citation_marks(two, None) == {}  # a model's answer citing two: the order it cited them in is not kept
    assert citation_marks(two, {"quoted": [{"passage": 3}]}, merged=True) == {}  # two experts' answers renumbered together
    assert citation_marks(two, {"quoted": [{"passage": 3}]}) == {3: 1, 1: 2}
    assert citation_marks([{"index": 1, "cited": False}, {"index": 2, "cited": True}], None) == {2: 1}  # one cited: it is [1]


def test_a_trace_keeps_the_mark_the_answer_gave_each_cited_passage():
    from console.traces import citation_marks
    from serving.chat import ChatResult

    decision = Decision(experts=[{"slug": "dmv", "score": 0.9}], router_version=3, embed_ms=1, route_ms=1, raw_scores={"dmv": 0.9}, score=0.95, threshold=0.3)
    passages = [{"index": i, "title": f"P{i}", "expert": "dmv", "document_id": i, "chunk_id": str(i), "score": 0.5} for i in (1, 2, 3)]
    # A model's answer citing the third passage first, then the first: [1] and [2] in that order.
    result = ChatResult(answer="Online [1], by mail [2].", expert="dmv", decision=decision, citations=[passages[2], passages[0]], passages=passages,
                        grounded=True, mode="auto", timings={}, request_id="r")
    kept = traces.build(decision, result)["passages"]
    assert [(p["index"], p["cited"], p["cited_as"]) for p in kept] == [(1, True, 2), (2, False, None), (3, True, 1)]
    assert citation_marks(kept, None) == {3: 1, 1: 2}  # known, though no sentence says which came first


def test_the_in_scope_score_is_named_as_such_and_confidence_is_the_routers_probability(client, world):
    _, staff = world
    abstained = Decision(experts=[{"slug": "dmv", "score": 0.45}, {"slug": "ssa", "score": 0.3}], router_version=3, embed_ms=1, route_ms=1,
                         abstained=True, raw_scores={"dmv": 0.45, "ssa": 0.3}, score=1.021, threshold=1.231)
    routed = dataclasses.replace(abstained, abstained=False, score=1.95)
    event("r-out", "", abstained=True, trace=traces.build(abstained, None), experts=abstained.experts)
    event("r-in", "dmv", trace=traces.build(routed, None), experts=routed.experts)
    client.force_login(staff)
    out = client.get(reverse("console-trace", args=["r-out"])).content.decode()
    routed_page = client.get(reverse("console-trace", args=["r-in"])).content.decode()
    listed = client.get(reverse("console-traces")).content.decode()

    assert "its in-scope score 1.02 was below the 1.23 needed to route it" in out
    assert "In-scope score 1.95, at or above the 1.23 needed to route" in routed_page
    for page in (out, routed_page):
        assert "confidence 1.0" not in page.lower()  # the in-scope score is not a confidence
        assert "Confidence that an expert covers it" not in page
        assert "Confidence: the router's probability that the question is each expert's." in page  # the bars are
        assert 'aria-label="confidence 0.450"' in page
        assert "{#" not in page  # the partial's note stays a comment
        assert "runner-up Social Security (confidence 0.300)" in page
    assert '<th title="the router\'s probability for the expert that answered">Confidence</th>' in listed


def test_the_list_and_the_trace_give_an_answer_the_same_confidence_and_only_the_trace_the_score_after_load_balancing(client, world):
    _, staff = world
    # The router was surer of Motor Vehicles, but it had answered more than its share of the recent questions: load
    # balancing put Social Security first, and Social Security answered. The list said 0.50 (after the penalty), its
    # trace 0.460 (before).
    balanced = Decision(experts=[{"slug": "ssa", "score": 0.5}, {"slug": "dmv", "score": 0.48}], router_version=3, embed_ms=1, route_ms=1,
                        raw_scores={"dmv": 0.52, "ssa": 0.46}, score=1.9, threshold=1.2)
    event("r-balanced", "ssa", question="When does my pension start?", trace=traces.build(balanced, None), experts=balanced.experts)
    unbalanced = dataclasses.replace(balanced, experts=[{"slug": "dmv", "score": 0.52}, {"slug": "ssa", "score": 0.46}])
    event("r-plain", "dmv", question="Renew my licence", trace=traces.build(unbalanced, None), experts=unbalanced.experts)
    client.force_login(staff)
    listed = client.get(reverse("console-traces"), {"q": "pension"}).content.decode()
    page = client.get(reverse("console-trace", args=["r-balanced"])).content.decode()

    in_list = re.findall(r'data-label="Confidence">([0-9.]+)', listed)
    on_trace = re.findall(r'<li class="chosen">\s*<span class="expert-name" title="ssa">Social Security</span>.*?<span class="score">([0-9.]+)</span>', page, re.S)
    assert in_list == on_trace == ["0.460"]
    assert "router's second choice" not in listed  # load balancing made it the router's first
    assert "runner-up Motor Vehicles (confidence 0.520)" in page
    # The score the experts were tried by, named apart, on the trace page only.
    assert ("<strong>Score after load balancing</strong>, the order the experts were tried in: Social Security 0.500, Motor Vehicles 0.480."
            in page)
    assert "0.500" not in listed
    assert "load balancing" not in listed.lower()
    assert 'id="router-load-balanced"' not in client.get(reverse("console-trace", args=["r-plain"])).content.decode()  # nothing to tell apart
