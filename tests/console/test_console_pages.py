"""The console's overview and playground pages: login required, what they show, how the playground answers."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from experts.models import Expert
from jobs.models import Job
from knowledge.models import Document
from routing.models import RouterVersion, RoutingEvent
from serving import chat, route
from tests.support.chat_results import fake_result

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


def answered(console, monkeypatch, result, question: str = "q") -> str:
    """The playground's answer fragment for ``question`` when serving answers with ``result``."""
    monkeypatch.setattr(chat, "answer", lambda question, model="auto", **_: result)
    return console.post(reverse("console-playground-answer"), {"question": question, "mode": "auto"}).content.decode()


@pytest.mark.parametrize(
    ("method", "name", "args"),
    [
        ("get", "console-overview", []),
        ("get", "console-playground", []),
        ("post", "console-playground", []),
        ("post", "console-playground-answer", []),
        ("get", "console-jobs", []),
        ("get", "console-job-rows", []),
        ("get", "console-job", [1]),
        ("get", "console-job-body", [1]),
    ],
)
def test_it_redirects_anonymous_users_to_login(client, method, name, args):
    url = reverse(name, args=args)
    response = getattr(client, method)(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_it_sends_anonymous_htmx_requests_to_the_login_page_of_the_current_page(client):
    response = client.post(
        reverse("console-playground-answer"), {"question": "hi"}, headers={"HX-Request": "true", "HX-Current-URL": "http://testserver/playground/"},
    )
    assert response.status_code == 204
    assert response["HX-Redirect"] == "/login/?next=/playground/"


def test_it_logs_in_through_the_login_form(client, owner):
    response = client.post(reverse("login"), {"username": "owner", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("console-overview")


def test_the_login_page_renders_the_form(client):
    response = client.get(reverse("login"))
    assert response.status_code == 200
    assert b'name="username"' in response.content
    assert b'name="password"' in response.content


def test_the_overview_lists_experts_with_documents_and_traffic(console, experts, settings):
    settings.LOAD_ALARM_MIN_REQUESTS = 1  # a handful of requests: let the share alarm fire
    dmv, _ssa = experts
    Document.objects.create(expert=dmv, external_id="a", title="A", content_hash="x", text="a", chunk_count=4)
    Document.objects.create(expert=dmv, external_id="b", title="B", content_hash="y", text="b", chunk_count=3)
    RoutingEvent.objects.create(request_id="r1", mode="auto", expert="dmv")
    RoutingEvent.objects.create(request_id="r2", mode="auto", expert="dmv")
    old = RoutingEvent.objects.create(request_id="r3", mode="auto", expert="dmv")
    RoutingEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))

    response = console.get(reverse("console-overview"))

    assert response.status_code == 200
    rows = {row.expert.slug: row for row in response.context["experts"]}
    assert sorted(rows) == ["dmv", "ssa", "va"]
    assert (rows["dmv"].documents, rows["dmv"].chunks, rows["dmv"].requests_today, rows["dmv"].requests_week) == (2, 7, 2, 3)
    assert (rows["ssa"].documents, rows["ssa"].chunks, rows["ssa"].requests_today, rows["ssa"].requests_week) == (0, 0, 0, 0)
    assert rows["dmv"].share == 1.0
    assert rows["dmv"].over_threshold
    assert rows["va"].expert.get_status_display() == "Disabled"
    html = response.content.decode()
    assert "Motor Vehicles" in html
    assert "Social Security" in html
    assert 'href="/experts/dmv/"' in html


def test_the_overview_shows_the_active_router_and_its_validation_accuracy(console, experts):
    RouterVersion.objects.create(version=1, path="/x/v1", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="a", metrics={"val": {"accuracy": 0.5}})
    RouterVersion.objects.create(version=2, path="/x/v2", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="b", metrics={"val": {"accuracy": 0.9462}}, is_active=True)

    html = console.get(reverse("console-overview")).content.decode()

    assert '<span class="stat-value" id="router-version">v2</span>' in html
    assert '<span class="stat-value" id="router-accuracy">94.6%</span>' in html


def test_the_overview_names_the_router_figure_agreement_with_labels_beside_how_good_the_labels_are(console, experts):
    """Issue 56: 93% "accuracy" was agreement with cluster labels while reviewers found the router right far less often."""
    from labeling.models import Assignment, Query, ReviewDecision
    from tests.factories import make_promoted_run

    dmv, ssa = experts
    RouterVersion.objects.create(version=1, path="/x/v1", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="a", metrics={"val": {"accuracy": 0.933}}, is_active=True)
    html = console.get(reverse("console-overview")).content.decode()
    assert "Agrees with your labels" in html
    assert "Validation accuracy" not in html
    assert "No reviews yet to check it against." in html
    assert "discovery run" not in html  # no run matched questions with documents

    for i, (routed, label) in enumerate([("dmv", dmv), ("dmv", dmv), ("dmv", ssa), ("ssa", ssa)]):
        ReviewDecision.objects.create(request_id=f"r{i}", reason="low_confidence", routed_expert=routed, expert=label)
    run = make_promoted_run(dmv, ssa)
    by_expert = {p.expert_id: p for p in run.proposals.all()}
    for i, (proposal_expert, documents_expert) in enumerate([(dmv, dmv), (dmv, ssa), (ssa, ssa), (ssa, ssa), (ssa, None)]):
        query = Query.objects.create(text=f"question {i}", text_hash=f"h{i}", row_hash=f"row{i}", source="log")
        Assignment.objects.create(run=run, query=query, topic=0, proposal=by_expert[proposal_expert.pk], documents_point_to=documents_expert)
    html = console.get(reverse("console-overview")).content.decode()
    assert "Reviewers agreed with the router on 75% of 4 reviewed questions." in html
    assert "25% of the last discovery run's questions have their best documents in another expert." in html


def test_a_team_member_sees_the_label_figures_of_their_own_experts_only(client, experts):
    from labeling.models import Assignment, Query, ReviewDecision
    from tests.factories import make_promoted_run, make_team, make_user

    dmv, ssa = experts
    roads = make_team("roads")
    dmv.team, ssa.team = roads, make_team("pensions")
    dmv.save()
    ssa.save()
    RouterVersion.objects.create(version=1, path="/x/v1", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="a", metrics={"val": {"accuracy": 0.9}}, is_active=True)
    ReviewDecision.objects.create(request_id="d", reason="low_confidence", routed_expert="dmv", expert=dmv)
    ReviewDecision.objects.create(request_id="s", reason="low_confidence", routed_expert="dmv", expert=ssa)  # another team's label
    run = make_promoted_run(dmv, ssa)
    by_expert = {p.expert_id: p for p in run.proposals.all()}
    for i, (owner, documents) in enumerate([(dmv, dmv), (dmv, dmv), (ssa, dmv), (ssa, dmv)]):
        query = Query.objects.create(text=f"q{i}", text_hash=f"h{i}", row_hash=f"r{i}", source="log")
        Assignment.objects.create(run=run, query=query, topic=0, proposal=by_expert[owner.pk], documents_point_to=documents)
    client.force_login(make_user("rita", teams=(roads,)))
    html = client.get(reverse("console-overview")).content.decode()
    assert "Reviewers agreed with the router on 100% of 1 reviewed question." in html
    assert "0% of the last discovery run's questions have their best documents in another expert." in html


def test_the_overview_says_when_no_router_is_trained(console):
    html = console.get(reverse("console-overview")).content.decode()
    assert "No router is trained yet" in html


def test_the_overview_shows_the_latest_five_jobs_and_the_running_ones(console):
    for i in range(7):
        Job.objects.create(kind="train_router", key=f"k{i}", title=f"Train router {i}", status="succeeded" if i != 3 else "running")

    response = console.get(reverse("console-overview"))

    assert [job.title for job in response.context["jobs"]] == [f"Train router {i}" for i in range(6, 1, -1)]
    assert [job.title for job in response.context["running"]] == ["Train router 3"]
    assert b"Train router 3" in response.content
    assert b"Train router 1" not in response.content


def test_the_playground_offers_the_modes_and_each_active_expert(console, experts):
    response = console.get(reverse("console-playground"))
    assert response.status_code == 200
    modes = [value for value, _label in response.context["form"].fields["mode"].choices]
    assert modes == ["auto", "auto:fast", "dmv", "ssa"]
    assert b'hx-post="/playground/answer/"' in response.content


def test_the_playground_rejects_an_empty_question(console, monkeypatch):
    monkeypatch.setattr(chat, "answer", lambda *a, **k: pytest.fail("answer() must not be called"))

    response = console.post(reverse("console-playground-answer"), {"question": "   ", "mode": "auto"}, headers={"HX-Request": "true"})

    assert response.status_code == 400
    assert b"Please enter a question." in response.content
    assert b"<html" not in response.content  # the partial, not the page


def test_the_playground_answers_with_the_routing_path_citations_and_latency(console, experts, monkeypatch):
    calls = []

    def fake_answer(question, model="auto", **_):
        calls.append((question, model))
        return fake_result(question)

    monkeypatch.setattr(chat, "answer", fake_answer)

    response = console.post(reverse("console-playground-answer"), {"question": "How do I renew?", "mode": "auto:fast"}, headers={"HX-Request": "true"})

    assert response.status_code == 200
    assert calls == [("How do I renew?", "auto:fast")]
    html = response.content.decode()
    assert "<html" not in html
    assert 'You can renew online up to 6 months before it expires. <a class="cite" href="#cite-1">[1]</a>' in html
    assert 'id="cite-1"' in html
    assert "Renewing a driver&#x27;s license" in html
    assert "Router v3" in html
    assert '<span style="width: 91.0%"></span>' in html  # dmv's score bar
    assert '<li class="chosen">' in html
    assert "30.2 ms" in html  # retrieval time
    assert "47.5 ms" in html  # total


def test_the_playground_shows_a_polite_reply_as_one_not_as_an_ungrounded_answer(console, experts, monkeypatch):
    result = fake_result("Thanks so much!")
    result.answer, result.expert, result.grounded, result.answer_source = "You're welcome.", "", False, "courtesy"
    result.citations, result.passages = [], []
    result.decision = route.Decision(experts=[], router_version=None, embed_ms=0.0, route_ms=0.0)
    html = answered(console, monkeypatch, result)

    assert "polite reply" in html
    assert "not grounded" not in html
    assert "Not routed: a reply to thanks or goodbye asks no expert." in html
    assert "Wrong expert?" not in html


def test_the_playground_escapes_the_answer(console, experts, monkeypatch):
    result = fake_result()
    result.answer = "<script>alert(1)</script> [1] [7]"
    html = answered(console, monkeypatch, result)

    assert "<script>alert(1)</script>" not in html
    assert '&lt;script&gt;alert(1)&lt;/script&gt; <a class="cite" href="#cite-1">[1]</a> [7]' in html


def test_the_playground_says_what_a_misspelt_question_was_searched_as(console, experts, monkeypatch):
    result = fake_result()
    result.spelling = {"searched_for": "renew my <b>driver</b> license", "corrections": [["drivr", "driver"]]}
    html = answered(console, monkeypatch, result, "renew my drivr license")

    assert "Searched for “renew my &lt;b&gt;driver&lt;/b&gt; license” (drivr → driver)" in html
    assert 'id="answer-spelling"' not in answered(console, monkeypatch, fake_result())


def test_the_playground_says_a_question_in_another_language_is_refused(console, experts, monkeypatch):
    result = fake_result("Muss ich meine Kennzeichen zurückgeben?")
    result.decision.abstained, result.decision.foreign, result.decision.score, result.decision.threshold = True, True, 0.9, 0.5
    result.answer, result.citations, result.refusal = route.OTHER_LANGUAGE_ANSWER, [], route.OTHER_LANGUAGE
    html = answered(console, monkeypatch, result, "Muss ich?")

    assert "not in the language of the experts&#x27; documents" in html
    assert "below its threshold" not in html  # not the abstention's reason: the confidence was above it


def test_the_playground_says_why_the_answer_quotes_its_sentence(console, experts, monkeypatch):
    result = fake_result()
    result.selection = {"quoted": [{"passage": 1, "sentence": 2, "score": 2.4, "text": "t", "reasons": ["follows a question", "opens <its> section"]}],
                        "runner_up": None, "candidates": 3}
    html = answered(console, monkeypatch, result)

    assert "Why this sentence: follows a question, opens &lt;its&gt; section." in html
    assert 'id="answer-why"' not in answered(console, monkeypatch, fake_result())


def test_the_playground_links_only_web_urls(console, experts, monkeypatch):
    result = fake_result()
    result.citations = [{**result.citations[0], "url": "javascript:alert(1)"}]
    html = answered(console, monkeypatch, result)

    assert "javascript:" not in html


def test_the_playground_explains_when_no_router_is_trained(console, monkeypatch):
    def unavailable(question, model="auto", **_):
        raise route.RoutingUnavailable("no router has been trained yet; train one in the console or run the demo")

    monkeypatch.setattr(chat, "answer", unavailable)

    response = console.post(reverse("console-playground-answer"), {"question": "Where is my refund?", "mode": "auto"}, headers={"HX-Request": "true"})

    assert response.status_code == 503
    assert b"Routing is not available yet." in response.content
    assert b"No router has been trained yet" in response.content


def test_the_playground_works_without_javascript(console, experts, monkeypatch):
    monkeypatch.setattr(chat, "answer", lambda question, model="auto", **_: fake_result(question))

    response = console.post(reverse("console-playground"), {"question": "How do I renew?", "mode": "auto"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" in html
    assert 'id="answer"' in html
    assert "You asked: “How do I renew?”" in html  # the answer says what it answers
    assert "How do I renew?</textarea>" not in html  # and the form is empty for the follow-up, in the same mode
    assert '<option value="auto" selected>' in html


def test_the_playground_page_shows_form_errors_without_javascript(console):
    response = console.post(reverse("console-playground"), {"question": "", "mode": "auto"})
    assert response.status_code == 400
    assert b"<html" in response.content
    assert b"Please enter a question." in response.content


def test_one_request_does_not_raise_the_load_alarm_anywhere_and_teams_see_only_their_alarms(console, experts, django_user_model, client):
    from django.contrib.auth.models import Group

    from routing.alarms import services as alarm_services
    from routing.alarms.models import Alarm

    RoutingEvent.objects.create(request_id="r1", mode="auto", expert="dmv")  # 100% of one request
    overview = console.get(reverse("console-overview"))
    assert not any(row.over_threshold for row in overview.context["experts"])
    assert 'id="load-alarm"' not in overview.content.decode()
    heatmap = console.get(reverse("console-heatmap"), {"window": "7d"})
    assert not any(row.over_threshold for row in heatmap.context["heatmap"].rows)
    assert alarm_services.check_load() == []  # the scheduled check agrees: below LOAD_ALARM_MIN_REQUESTS
    for i in range(2, 51):
        RoutingEvent.objects.create(request_id=f"r{i}", mode="auto", expert="dmv")
    assert [a.subject for a in alarm_services.check_load()] == ["dmv"]
    assert console.get(reverse("console-overview")).context["experts"][0].over_threshold  # and now they agree again

    roads, pensions = Group.objects.create(name="roads"), Group.objects.create(name="pensions")
    Expert.objects.filter(slug="dmv").update(team=roads)
    Expert.objects.filter(slug="ssa").update(team=pensions)
    Alarm.objects.create(kind="drift", key="drift:router", subject="router", message="The questions have drifted.")
    member = django_user_model.objects.create_user("pat", "pat@example.com", "pw-pat-12345")
    member.groups.add(pensions)
    client.force_login(member)
    page = client.get(reverse("console-alarms")).content.decode()
    assert "The questions have drifted." in page  # about the router: everyone's
    assert "Expert dmv answered" not in page  # another team's expert


def test_the_playground_continues_a_conversation_and_searches_follow_ups_with_it(console, experts, monkeypatch):
    calls = []

    def fake_answer(question, model="auto", **request):
        calls.append({"question": question, **request})
        result = fake_result(question)
        result.conversation_id = "conv_abc"
        result.earlier_turns_searched = len(request.get("history") or [])
        return result

    monkeypatch.setattr(chat, "answer", fake_answer)
    first = console.post(reverse("console-playground-answer"), {"question": "How do I renew my licence?", "mode": "auto"}).content.decode()
    assert calls[-1]["history"] == []
    assert calls[-1]["conversation_id"] == ""
    assert '<input type="hidden" name="conversation_id" value="conv_abc">' in first
    assert '<input type="hidden" name="earlier" value="How do I renew my licence?">' in first
    assert "Start a new conversation" in first
    assert "Follow-up question" in first
    assert 'id="answer-conversation"' not in first

    second = console.post(reverse("console-playground-answer"), {"question": "and the fee?", "mode": "auto", "conversation_id": "conv_abc",
                                                                 "earlier": "How do I renew my licence?"}).content.decode()
    assert calls[-1]["history"] == [{"role": "user", "content": "How do I renew my licence?"}]
    assert calls[-1]["conversation_id"] == "conv_abc"
    assert "Searched with your 1 earlier question in this conversation" in second
    assert "(2 questions so far)" in second
    assert 'id="routing-conversation"' not in second  # the router was sure of the question alone

    def ranked_with_conversation(question, model="auto", **request):
        result = fake_answer(question, model, **request)
        result.decision.conversation = {"earlier_turns": 1, "question_alone": {"expert": "ssa", "probability": 0.52}, "weight": 3.0}
        return result

    monkeypatch.setattr(chat, "answer", ranked_with_conversation)
    unsure = console.post(reverse("console-playground-answer"), {"question": "and the fee?", "mode": "auto", "conversation_id": "conv_abc",
                                                                 "earlier": "How do I renew my licence?"}).content.decode()
    assert "Ranked with your 1 earlier question in this conversation: on its own this question was unsure (closest to Social Security, 0.52)" in unsure

    def kept(question, model="auto", **request):
        result = fake_answer(question, model, **request)
        result.sticky, result.conversation_expert, result.conversation_expert_from = True, "dmv", "stored"
        return result

    monkeypatch.setattr(chat, "answer", kept)
    stayed = console.post(reverse("console-playground-answer"), {"question": "and the fee?", "mode": "auto", "conversation_id": "conv_abc",
                                                                 "earlier": "How do I renew my licence?"}).content.decode()
    assert "It stayed with this conversation's expert Motor Vehicles: no other expert scored clearly higher." in stayed
    assert 'id="routing-kept"' not in unsure

    def changed_subject(question, model="auto", **request):
        result = fake_answer(question, model, **request)
        result.earlier_turns_searched, result.earlier_turns_left_out = 0, len(request.get("history") or [])
        return result

    monkeypatch.setattr(chat, "answer", changed_subject)
    third = console.post(reverse("console-playground-answer"), {"question": "what's the weather tomorrow?", "mode": "auto", "conversation_id": "conv_abc",
                                                                "earlier": "How do I renew my licence?\nand the fee?"}).content.decode()
    assert "Searched with this question alone" in third
    assert "it may start a new subject, and your earlier questions in this conversation were left out" in third


def test_the_playground_refuses_a_conversation_it_cannot_continue(console, experts, monkeypatch):
    from serving import conversations

    monkeypatch.setattr(chat, "answer", lambda *a, **k: pytest.fail("answer() must not be called"))
    bad = console.post(reverse("console-playground-answer"), {"question": "and the fee?", "mode": "auto", "conversation_id": "not an id!"})
    assert bad.status_code == 400
    assert b"This conversation cannot be continued; start a new one." in bad.content

    def other_keys(*args, **kwargs):
        raise conversations.ConversationNotAllowed("conversation 'conv_x' belongs to another API key")

    monkeypatch.setattr(chat, "answer", other_keys)
    refused = console.post(reverse("console-playground-answer"), {"question": "and the fee?", "mode": "auto", "conversation_id": "conv_x"})
    assert refused.status_code == 400
    assert b"belongs to an API key" in refused.content


def test_experts_cut_short_from_an_expert_page_lead_to_the_overview_list(client, owner):
    client.force_login(owner)
    response = client.get("/experts/")
    assert response.status_code == 302
    assert response["Location"] == reverse("console-overview") + "#experts"


def test_the_playground_names_the_in_scope_score_and_keeps_confidence_for_the_routers_probability(console, experts, monkeypatch):
    result = fake_result()
    result.decision.abstained, result.decision.score, result.decision.threshold = True, 1.021, 1.231
    html = answered(console, monkeypatch, result)

    assert "the question's in-scope score 1.02 is below the 1.23 needed to route it." in html
    assert "confidence 1.021" not in html
    assert "Confidence: the router's probability that the question is each expert's." in html
    assert 'aria-label="confidence 0.910"' in html


def test_the_playground_gives_the_confidence_its_trace_gives_not_the_score_after_load_balancing(console, experts, monkeypatch):
    result = fake_result()
    # Load balancing moved Social Security up a little and Motor Vehicles down: the bars are the router's probabilities.
    result.decision.experts = [{"slug": "dmv", "score": 0.905}, {"slug": "ssa", "score": 0.075}]
    result.decision.raw_scores = {"dmv": 0.91, "ssa": 0.07}
    html = answered(console, monkeypatch, result)

    assert 'aria-label="confidence 0.910"' in html
    assert 'aria-label="confidence 0.070"' in html
    assert "0.905" not in html
