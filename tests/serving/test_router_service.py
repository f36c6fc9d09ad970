"""Serving decisions through routing.services: ranking, abstention to the fallback expert, capacity, failover, bad input.

A tiny router is built by hand (RouterNet with one prototype per expert along its own axis) and
registered as the active RouterVersion in a temporary ROUTER_DIR; the encoder is a fake that maps
keywords to those axes, so every decision is known in advance.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from experts.models import Expert
from knowledge.ml.distinct import DistinctWords
from routing import services
from routing.ml import conversation as conversation_rule
from routing.ml.router import RouterNet
from routing.models import RouterVersion, RoutingEvent, TrainingRun
from serving import chat, route, traces
from tests.factories import make_expert
from tests.support.serving import DIM, EXPERTS, FakeStore, install_router

pytestmark = pytest.mark.django_db


@pytest.fixture
def router(tmp_path, settings, fake_encoder):
    """An active router over three experts, abstaining below similarity 0.5 to every prototype, trained on "fake" vectors."""
    yield install_router(tmp_path, settings, embedding_model="fake")
    route._router_cache.clear()


def test_the_nearest_expert_is_ranked_first_with_all_three_as_failover(router):
    decision = route.route("how do I renew my licence", top_k=2)
    assert [e["slug"] for e in decision.experts] == ["dmv", "ssa", "va"]
    assert [e["slug"] for e in decision.failover] == ["dmv", "ssa", "va"]
    assert not decision.abstained
    assert decision.fallback is None
    assert set(decision.raw_scores) == set(EXPERTS)
    assert decision.raw_scores["dmv"] > 0.99
    assert decision.score == pytest.approx(1.0)
    assert decision.router_version == 1


def test_a_question_like_nothing_seen_abstains_to_the_fallback_expert(router):
    make_expert("general", "General", is_fallback=True)
    decision = route.route("what is the meaning of life")
    assert decision.abstained
    assert decision.fallback == "general"
    assert decision.score == pytest.approx(0.0)
    assert len(decision.failover) == 3  # still ranked, for whoever wants to try


def test_an_abstained_answer_comes_from_the_fallback_experts_collection(router, monkeypatch):
    make_expert("general", "General", is_fallback=True)
    searched = []
    monkeypatch.setattr(chat.knowledge, "search_experts", lambda experts, *a, **k: searched.append([e.slug for e in experts]) or [])
    result = chat.answer("what is the meaning of life", model="auto")
    assert searched == [["general"]]
    assert result.abstained
    assert result.fallback_used
    assert result.expert == "general"
    event = RoutingEvent.objects.get(request_id=result.request_id)
    assert event.abstained
    assert event.fallback_used


def test_without_a_fallback_expert_the_answer_says_no_expert_covers_it(router, monkeypatch):
    monkeypatch.setattr(chat.knowledge, "search_experts", lambda *a, **k: pytest.fail("nothing should be searched"))
    result = chat.answer("what is the meaning of life", model="auto")
    assert result.answer == "No expert covers this question."
    assert result.abstained
    assert not result.fallback_used
    assert result.expert == ""
    assert result.citations == []
    assert not result.grounded
    assert set(result.timings) == {"embed_ms", "route_ms", "retrieve_ms", "generate_ms", "total_ms"}
    assert RoutingEvent.objects.get(request_id=result.request_id).abstained


def test_the_chat_endpoint_reports_abstention_and_failover(router, client):
    body = {"model": "auto", "messages": [{"role": "user", "content": "what is the meaning of life"}]}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    meta = response.json()["switchboard"]
    assert meta["abstained"] is True
    assert meta["fallback_used"] is False
    assert (meta["expert"], meta["expert_name"]) == ("", None)  # nobody answered
    assert [e["slug"] for e in meta["failover"]] == ["dmv", "ssa", "va"]
    assert response.json()["choices"][0]["message"]["content"] == "No expert covers this question."


def test_the_route_endpoint_reports_abstention_and_failover(router, client):
    response = client.post("/api/v1/route", data={"question": "my veteran benefits", "top_k": 1}, content_type="application/json")
    assert response.status_code == 200
    assert [e["slug"] for e in response.json()["experts"]] == ["va"]
    assert response.json()["failover"][0]["slug"] == "va"
    assert response.json()["abstained"] is False


def test_an_expert_over_its_capacity_share_is_skipped_to_the_next(router, settings):
    settings.ROUTER_CAPACITY = 0.6
    route._router_cache.clear()
    firsts = [route.route("licence and pension").experts[0]["slug"] for _ in range(10)]
    # The window holds 10 slots: dmv may take 6; from then on its questions go to the runner-up.
    assert firsts == ["dmv"] * 7 + ["ssa"] * 3
    last = route.route("licence and pension")
    assert [e["slug"] for e in last.failover] == ["ssa", "va", "dmv"]


def test_the_load_penalty_moves_close_calls_away_from_a_busy_expert(router, settings):
    settings.ROUTER_LOAD_PENALTY = 1.0
    route._router_cache.clear()
    firsts = [route.route("licence and pension").experts[0]["slug"] for _ in range(6)]
    assert firsts[0] == "dmv"
    assert "ssa" in firsts


def test_an_inactive_expert_is_never_chosen(router):
    Expert.objects.filter(slug="dmv").update(status="disabled")
    decision = route.route("how do I renew my licence", top_k=3)
    assert "dmv" not in [e["slug"] for e in decision.experts]
    assert "dmv" not in decision.raw_scores


@pytest.mark.parametrize("question", ["", "   \n"])
def test_an_empty_question_is_refused(router, question):
    with pytest.raises(route.InvalidQuestion, match="empty"):
        route.route(question)


@pytest.mark.parametrize("top_k", [0, 4])
def test_top_k_must_be_one_to_three(router, top_k):
    with pytest.raises(route.InvalidQuestion, match="top_k"):
        route.route("licence", top_k=top_k)


def test_a_50000_character_question_is_cut_before_encoding(router, fake_encoder, settings):
    decision = route.route("licence " * 6250)
    assert decision.experts[0]["slug"] == "dmv"
    assert len(fake_encoder.seen[-1]) <= settings.MAX_QUESTION_CHARS


def test_no_active_router_is_unavailable(router):
    RouterVersion.objects.update(is_active=False)
    with pytest.raises(route.RoutingUnavailable, match="no router"):
        route.route("licence")


def test_a_recreated_version_with_the_same_row_and_folder_is_loaded_again(router):
    """A database made again (a restore, another test) may reuse version 1's row id and folder for other experts."""
    route.route("how do I renew my licence")
    stale = route._router_cache["active"][0]
    RouterVersion.objects.filter(pk=stale.pk).update(experts=["ssa", "dmv", "va"])
    route.clear_serving_caches()

    route.route("how do I renew my licence")

    assert route._router_cache["active"][0].experts == ["ssa", "dmv", "va"]
    assert route._router_cache["active"][0] is not stale


def test_warming_up_loads_the_router_and_leaves_the_load_window_empty(router):
    route._router_cache.clear()
    assert route.warm_up()
    assert "active" in route._router_cache
    version, _, arbiter = route._router_cache["active"]
    assert not arbiter.window.load_array(version.experts).any()  # the made-up question is not a user's
    RouterVersion.objects.update(is_active=False)
    route.clear_serving_caches()
    route._router_cache.clear()
    assert not route.warm_up()  # nothing to load yet: the platform starts all the same


# --- training from labels ------------------------------------------------------------------------

def test_training_from_labels_stores_diagnostics_and_an_abstain_threshold(labelled):
    labelled({"dmv": 40, "ssa": 40, "va": 40})
    make_expert("empty", "Nobody labelled me")
    version = services.train_router_from_labels({"epochs": 5, "seed": 0, "hidden_dim": 128})
    assert version.is_active
    assert version.experts == EXPERTS
    assert "abstain_threshold" in version.metrics
    assert version.metrics["experts_without_examples"] == ["empty"]
    run = TrainingRun.objects.get(router_version=version)
    diagnostics = run.metrics["diagnostics"]
    assert set(diagnostics["per_expert"]) == set(EXPERTS)
    assert len(diagnostics["confusion"]) == 3
    assert {"load_cv", "ece", "ece_calibrated", "temperature", "undecided", "logit_variance"} <= set(diagnostics)
    assert RouterNet.load(version.path).has_prototypes


def test_a_trained_router_reads_spelling_too_and_odd_questions_route_or_abstain(labelled, fake_encoder, settings):
    """The served router blends the character view: a misspelt question whose embedding says nothing still finds its expert."""
    from pathlib import Path

    labelled({"dmv": 40, "ssa": 40, "va": 40})
    version = services.train_router_from_labels({"epochs": 5, "seed": 0, "hidden_dim": 128})
    assert (Path(version.path) / "charview" / "weights.safetensors").exists()
    assert set(version.metrics["abstain_score"].split("+")) <= {"prototype_similarity", "nearest_questions", "char_confidence"}
    assert {"nearest_mix", "char_scale", "candidates"} <= set(version.metrics["in_scope"])
    assert version.metrics["typos"]["copies"] > 0
    misspelt = route.route("ssa questoin 7")
    assert misspelt.experts[0]["slug"] == "ssa"  # the fake encoder maps it nowhere; its letters say ssa
    assert misspelt.views["spelling"]["expert"] == "ssa"
    assert {"meaning", "spelling", "spelling_weight"} <= set(misspelt.views) <= {"meaning", "spelling", "spelling_weight", "examples"}
    assert ("examples" in misspelt.views) == bool(version.metrics["nearest"]["weight"])
    for question in ["🙂🙂🙂", "x" * 8000, "ssa Frage über die Rente 年金 pension", "   renew   "]:
        decision = route.route(question)
        assert decision.experts
        assert decision.score is not None
        assert decision.abstained in (True, False)
        assert decision.threshold is not None


def test_training_with_one_expert_fails_clearly_and_activates_nothing(labelled):
    from jobs.services import JobFailed

    labelled({"dmv": 30})
    with pytest.raises(JobFailed, match="at least two experts"):
        services.train_router_from_labels({"epochs": 2})
    assert not RouterVersion.objects.exists()


def test_a_diverging_training_fails_and_keeps_the_active_router(labelled, router):
    from jobs.services import JobFailed

    RouterVersion.objects.all().delete()
    Expert.objects.all().delete()
    labelled({"dmv": 30, "ssa": 30})
    services.train_router_from_labels({"epochs": 2, "seed": 0, "hidden_dim": 128})
    good = RouterVersion.objects.get(is_active=True)
    with pytest.raises(JobFailed, match="diverged"):
        services.train_router_from_labels({"epochs": 5, "lr": 1e30, "seed": 1, "hidden_dim": 128})
    assert RouterVersion.objects.get(is_active=True) == good
    assert RouterVersion.objects.count() == 1


def test_bad_training_parameters_fail_clearly(labelled):
    from jobs.services import JobFailed

    labelled({"dmv": 30, "ssa": 30})
    with pytest.raises(JobFailed, match="hidden_dim"):
        services.train_router_from_labels({"hidden_dim": 4096})


def test_an_expert_with_a_single_labelled_query_keeps_it_for_training(labelled):
    labelled({"dmv": 30, "ssa": 30, "va": 1})
    version = services.train_router_from_labels({"epochs": 2, "seed": 0, "hidden_dim": 128})
    assert version.experts == EXPERTS
    assert TrainingRun.objects.get(router_version=version).metrics["diagnostics"]["per_expert"]["va"]["support"] == 0


def test_earlier_turns_reach_a_router_with_a_context_path_and_are_ignored_by_others(router, tmp_path, fake_encoder):
    plain = route.route("my pension", context=["licence", "licence"])
    assert plain.raw_scores == route.route("my pension").raw_scores
    torch.manual_seed(1)
    model = RouterNet(input_dim=DIM, n_experts=3, use_conv=False, hidden_dim=128, context_dim=4)
    model.save(tmp_path / "v2")
    RouterVersion.objects.update(is_active=False)
    RouterVersion.objects.create(version=2, path=str(tmp_path / "v2"), experts=EXPERTS, embedding_model="fake", data_fingerprint="c", is_active=True)
    without = route.route("my pension")
    with_history = route.route("my pension", context=["licence", "  ", "veteran"])
    assert with_history.raw_scores != without.raw_scores
    assert fake_encoder.seen[-2:] == ["licence", "veteran"]  # blank turns are dropped, the rest encoded in order


@pytest.fixture
def unsure_below(monkeypatch):
    """The fixture's "licence and pension" gets ~0.67 alone: a threshold above it makes it an unsure question."""
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 3.0)
    monkeypatch.setattr(conversation_rule, "CONTEXT_BELOW", 0.8)


def test_an_unsure_follow_up_is_ranked_with_the_earlier_questions(router, fake_encoder, unsure_below):
    alone = route.route("licence and pension")  # leans a little towards dmv: unsure between two experts
    assert alone.experts[0]["slug"] == "dmv"
    assert max(alone.raw_scores.values()) < 0.8
    assert alone.conversation is None
    follow_up = route.route("licence and pension", context=["my pension"])
    assert follow_up.experts[0]["slug"] == "ssa"  # the conversation is about pensions
    assert follow_up.conversation == {"earlier_turns": 1, "question_alone": {"expert": "dmv", "probability": pytest.approx(alone.raw_scores["dmv"], abs=1e-4)},
                                      "weight": 3.0}
    assert follow_up.score == alone.score
    assert not follow_up.abstained
    assert follow_up.context_turns == 1
    assert follow_up.context_vectors.shape == (1, 8)
    assert traces.routing_evidence(follow_up)["conversation"]["question_alone"]["expert"] == "dmv"
    stored = route.route("licence and pension", context_vectors=fake_encoder.encode(["my pension"]))  # a stored conversation's embeddings
    assert stored.raw_scores == follow_up.raw_scores


def test_a_sure_or_out_of_scope_question_is_ranked_alone_and_its_conversation_not_encoded(router, fake_encoder, monkeypatch, unsure_below):
    sure = route.route("renew my licence", context=["my pension"])
    assert sure.experts[0]["slug"] == "dmv"
    assert sure.conversation is None
    assert sure.context_vectors is None
    assert "my pension" not in fake_encoder.seen  # nothing was encoded for a question the router was sure of
    off_topic = route.route("the weather tomorrow", context=["my pension"])
    assert off_topic.abstained
    assert off_topic.conversation is None
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 0)
    assert route.route("licence and pension", context=["my pension"]).experts[0]["slug"] == "dmv"
    monkeypatch.setattr(conversation_rule, "CONTEXT_WEIGHT", 3.0)
    monkeypatch.setattr(conversation_rule, "CONTEXT_BELOW", 0.6)  # 0.67 alone is sure enough
    assert route.route("licence and pension", context=["my pension"]).conversation is None


def test_the_route_endpoint_reads_the_earlier_questions(router, client, unsure_below):
    body = {"question": "licence and pension", "context": ["my pension", "  "]}
    response = client.post("/api/v1/route", data=body, content_type="application/json")
    assert response.status_code == 200
    assert response.json()["experts"][0]["slug"] == "ssa"
    assert response.json()["routing_evidence"]["conversation"]["earlier_turns"] == 1
    bad = client.post("/api/v1/route", data={"question": "x", "context": "my pension"}, content_type="application/json")
    assert bad.status_code == 400
    assert "context" in json.dumps(bad.json())


def test_a_chat_follow_up_routed_with_its_conversation_searches_with_the_same_turns(router, client, fake_encoder, monkeypatch, unsure_below):
    store = FakeStore()
    monkeypatch.setattr(chat.knowledge, "search_experts", store)
    body = {"model": "auto", "messages": [{"role": "user", "content": "my pension"}, {"role": "assistant", "content": "..."},
                                          {"role": "user", "content": "licence and pension"}]}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa"
    assert meta["routing_evidence"]["conversation"] == {"earlier_turns": 1, "question_alone": {"expert": "dmv", "probability": pytest.approx(0.67, abs=0.03)},
                                                         "weight": 3.0}
    assert fake_encoder.seen.count("my pension") == 1  # encoded once, for the router; the search read the same vectors
    event = RoutingEvent.objects.get(request_id=response.json()["id"])
    assert event.trace["evidence"]["conversation"]["earlier_turns"] == 1


def _with_combiner(version, weights=(0.2, 0.0, 5.0), threshold=0.3):
    """Give the active router a knowledge combiner that trusts keyword evidence, with its own abstain threshold."""
    from routing.ml.knowledge import KnowledgeCombiner

    KnowledgeCombiner(np.asarray(weights, dtype=float), score_scale=1.0).save(version.path)
    version.metrics = {**version.metrics, "knowledge": {"fitted": True, "abstain_threshold": threshold}}
    version.save()
    route._router_cache.clear()


def test_knowledge_evidence_reranks_the_candidates_and_is_shown(router, monkeypatch):
    from knowledge import evidence as knowledge_evidence

    _with_combiner(router)
    evidence = {"dmv": (0.2, 0.0), "ssa": (0.8, 9.0), "va": (0.1, 0.0)}
    monkeypatch.setattr(knowledge_evidence, "evidence_lookup",
                        lambda slugs: lambda positions, vector, text: [evidence[slugs[j]] for j in positions])
    decision = route.route("how do I renew my licence")  # the router alone says dmv
    assert decision.experts[0]["slug"] == "ssa"
    assert decision.threshold == 0.3  # the knowledge-calibrated threshold, not the router's 0.5
    assert decision.views["knowledge"]["ssa"] == {"best_match": 0.8, "keyword_score": 9.0}
    assert set(decision.views["knowledge"]) == set(EXPERTS)


def test_a_question_with_a_word_of_one_experts_documents_is_kept_in_scope(router, monkeypatch):
    """The router alone turns "what is PSLF?" away; with the word weight validation gave, its jargon keeps it."""
    from knowledge import evidence as knowledge_evidence
    from knowledge import vocabulary as knowledge_vocabulary
    from routing.ml.knowledge import ROUTER_ALONE, KnowledgeCombiner

    monkeypatch.setattr(knowledge_evidence, "evidence_lookup", lambda slugs: lambda positions, vector, text: [(0.0, 0.0)] * len(positions))
    asked = []
    # The documents: "PSLF" is Student Aid's word (here "va", the router's last candidate), "weather" is nobody's.
    words = DistinctWords.from_texts([["Renew your license."], ["Retirement benefits."], ["Apply for PSLF with the PSLF form."]],
                                     known={"renew", "your", "license", "retirement", "benefits", "apply", "for", "with", "the", "form"})

    def distinct_words(slugs):
        asked.append(list(slugs))
        return words

    monkeypatch.setattr(knowledge_vocabulary, "distinct_words", distinct_words)
    KnowledgeCombiner(np.asarray(ROUTER_ALONE), score_scale=0.0, word_scale=1.0).save(router.path)
    router.metrics = {**router.metrics, "knowledge": {"fitted": True, "abstain_threshold": 1.0}}
    router.save()
    route._router_cache.clear()
    assert route.warm_up()
    assert asked == [list(EXPERTS)]  # the word table is built before the first question
    decision = route.route("what is PSLF?")
    assert not decision.abstained  # its score plus the word's weight clears the threshold of 1.0
    assert decision.views["knowledge"]["va"]["word"] == "pslf"  # the trace says which word, and whose
    assert decision.views["knowledge"]["va"]["jargon"] == pytest.approx(words.score("what is PSLF?"), abs=0.01)
    assert route.route("what is the weather?").abstained
    assert len(asked) == 3
    KnowledgeCombiner(np.asarray(ROUTER_ALONE), score_scale=0.0, word_scale=0.0).save(router.path)
    route._router_cache.clear()
    decision = route.route("what is PSLF?")
    assert decision.abstained  # without the words' weight: turned away, and nothing asked
    assert len(asked) == 3
    assert all("word" not in found for found in decision.views["knowledge"].values())


def test_a_key_scoped_to_some_experts_sees_no_evidence_of_the_others(router, monkeypatch):
    from knowledge import evidence as knowledge_evidence

    _with_combiner(router)
    monkeypatch.setattr(knowledge_evidence, "evidence_lookup", lambda slugs: lambda positions, vector, text: [(0.5, 1.0)] * len(positions))
    decision = route.route("how do I renew my licence", allowed={"dmv", "va"})
    assert set(decision.views["knowledge"]) == {"dmv", "va"}


def test_an_unreadable_store_routes_with_the_router_alone(router, monkeypatch, settings):
    from knowledge import evidence as knowledge_evidence
    from knowledge.stores import StoreUnavailable

    _with_combiner(router)

    def down(positions, vector, text):
        raise StoreUnavailable("the store's folder is gone")

    monkeypatch.setattr(knowledge_evidence, "evidence_lookup", lambda slugs: down)
    decision = route.route("how do I renew my licence")
    assert decision.experts[0]["slug"] == "dmv"
    assert decision.threshold == 0.5
    assert "gone" in decision.views["knowledge"]["unavailable"]
    settings.ROUTER_KNOWLEDGE = False  # and switched off, no evidence is looked up at all
    monkeypatch.setattr(knowledge_evidence, "evidence_lookup", lambda slugs: pytest.fail("looked up evidence with ROUTER_KNOWLEDGE off"))
    assert "knowledge" not in route.route("how do I renew my licence").views


@pytest.mark.parametrize("question", ["   how   ", "🚗🚗🚗", "renew " * 1600, "¿Cómo renuevo mi licence de conducir? 运转"])
def test_odd_questions_route_or_abstain_with_the_real_evidence_lookup(router, question, settings, tmp_path):
    """No collection holds a chunk here: every candidate's evidence is missing, and routing still decides."""
    settings.QDRANT_PATH = str(tmp_path / "qdrant")
    _with_combiner(router)
    decision = route.route(question)
    assert decision.abstained or decision.experts
    assert all(found == {"best_match": None, "keyword_score": None} for found in decision.views["knowledge"].values())


def test_a_router_trained_in_another_embedding_space_is_logged_once_per_process(router, caplog):
    # The fixture's router says it was trained on "fake" vectors: not what the encoder makes now.
    with caplog.at_level("WARNING", logger="serving.route"):
        route.route("how do I renew my licence", top_k=2)
        route.route("how do I apply for benefits", top_k=2)
    warned = [r for r in caplog.records if r.getMessage() == "routing.router.other_embedding_space"]
    assert len(warned) == 1
    assert (warned[0].router_version, warned[0].trained_on) == (1, "fake")
    assert "train the router again" in warned[0].action


@pytest.mark.parametrize("earlier", [[""], ["   "], ["🚗🚗"], ["x" * 9000], ["Wie erneuere ich meinen Führerschein? licence"], ["my pension"] * 12])
def test_odd_earlier_questions_route_a_follow_up_or_leave_it_alone_and_never_raise(router, unsure_below, earlier):
    decision = route.route("licence and pension", context=earlier)
    assert decision.experts
    assert not decision.abstained
    if decision.conversation is not None:
        assert 1 <= decision.conversation["earlier_turns"] <= 5  # blank turns dropped, at most the last five read
    expert, turns = route.earlier_expert([t for t in earlier if t.strip()] or ["?"])
    assert expert in {None, *EXPERTS}
    assert len(turns) >= 1


def test_a_conversation_never_moves_a_question_to_an_expert_the_question_alone_rules_out(router, unsure_below):
    alone = route.route("licence and pension")  # unsure between dmv and ssa; va is out of the question
    assert alone.raw_scores["va"] < 0.05
    follow_up = route.route("licence and pension", context=["veteran", "veteran benefits"])
    assert follow_up.conversation is not None  # ranked with its conversation ...
    assert follow_up.experts[0]["slug"] in {"dmv", "ssa"}  # ... which is about va: it breaks no tie there
    assert follow_up.raw_scores["va"] == 0.0
    assert follow_up.conversation["ruled_out"] == {"expert": "va", "probability_alone": pytest.approx(alone.raw_scores["va"], abs=1e-4)}
    assert traces.routing_evidence(follow_up)["conversation"]["ruled_out"]["expert"] == "va"  # the API and the trace say so
