"""Failover through circuit breakers: a failing expert's store or generator hands the question to the next-ranked expert.

The fixtures (a hand-built router over three experts, a keyword encoder, a fake store and a fake
generator whose failures each test chooses) are ``tests/support/serving.py``'s, shared by the other
chat-API test modules: every decision is known in advance and nothing needs a model or a vector store.
"""

from __future__ import annotations

import json

from experts.generation import GenerationError, GenerationTimeout
from experts.ml.extractive import Answer
from experts.models import Expert
from routing.experiments.assignment import ArmAssignment
from routing.models import RouterVersion, RoutingEvent
from serving import accurate, events
from serving import chat as serving_chat
from tests.support.serving import chat, event_for


def test_when_the_first_experts_generator_fails_the_next_ranked_expert_answers(serving, client):
    serving["generator"].fail["dmv"] = GenerationError
    response = chat(client, "how do I renew my licence", model="auto:fast")
    assert response.status_code == 200, response.content
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa"
    assert meta["fallback_used"] is True
    assert meta["failover_from"] == [{"slug": "dmv", "reason": "generator_error"}]
    assert response["x-switchboard-expert"] == "ssa"
    assert response.json()["choices"][0]["message"]["content"].startswith("ssa says:")
    event = event_for(response.json()["id"])
    assert event.expert == "ssa"
    assert event.failover_from == [{"slug": "dmv", "reason": "generator_error"}]
    assert event.fallback_used


def test_a_healthy_request_uses_no_fallback_and_fuses_the_top_two_for_auto(serving, client):
    response = chat(client, "how do I renew my licence")
    meta = response.json()["switchboard"]
    assert meta["expert"] == "dmv"
    assert meta["fallback_used"] is False
    assert meta["failover_from"] == []
    assert serving["store"].calls == [["dmv", "ssa"]]


def test_a_timeout_is_reported_with_its_kind(serving):
    serving["generator"].fail["dmv"] = GenerationTimeout
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "generator_timeout"}]


def test_the_vector_store_down_for_one_expert_fails_over_to_the_next(serving):
    serving["store"].down = {"dmv"}
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "store_unavailable"}]


def test_the_breaker_opens_after_repeated_failures_and_the_expert_is_then_skipped(serving, settings):
    settings.BREAKER_FAILURES = 2
    gen = serving["generator"]
    gen.fail["dmv"] = GenerationError
    for _ in range(2):
        assert serving_chat.answer("how do I renew my licence", model="auto:fast").expert == "ssa"
    from experts.breaker import breaker_for

    assert breaker_for("dmv").state == "open"
    gen.calls.clear()
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert result.expert == "ssa"
    assert result.failover_from == [{"slug": "dmv", "reason": "circuit_open"}]
    assert "dmv" not in gen.calls  # an open breaker costs the down expert nothing


def test_a_success_keeps_the_breaker_closed(serving, settings):
    settings.BREAKER_FAILURES = 2
    gen = serving["generator"]
    gen.fail["dmv"] = GenerationError
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    del gen.fail["dmv"]
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    gen.fail["dmv"] = GenerationError
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    from experts.breaker import breaker_for

    assert breaker_for("dmv").state == "closed"  # two failures, but not consecutive


def test_when_every_expert_is_down_the_answer_is_503_naming_each_reason_and_still_recorded(serving, client):
    serving["store"].down = {"dmv", "ssa", "va"}
    response = chat(client, "how do I renew my licence")
    assert response.status_code == 503
    error = response.json()["error"]
    assert error["type"] == "service_unavailable"
    assert error["code"] == "no_expert_available"
    assert [f["slug"] for f in error["details"]["failover_from"]] == ["dmv", "ssa", "va"]
    assert {f["reason"] for f in error["details"]["failover_from"]} == {"store_unavailable"}
    events.flush()
    event = RoutingEvent.objects.get()
    assert event.status_code == 503
    assert event.error_kind == "no_expert_available"
    assert len(event.failover_from) == 3


def test_a_direct_request_does_not_fail_over_to_other_experts(serving, client):
    serving["generator"].fail["va"] = GenerationError
    response = chat(client, "how do I renew my licence", model="va")
    assert response.status_code == 503
    assert response.json()["error"]["details"]["failover_from"] == [{"slug": "va", "reason": "generator_error"}]
    assert serving["generator"].calls == ["va"]


def test_accurate_mode_merges_both_experts_answers_with_renumbered_citations(serving, client):
    response = chat(client, "licence and pension", model="auto:accurate")
    assert response.status_code == 200, response.content
    body = response.json()
    text = body["choices"][0]["message"]["content"]
    assert text == "DMV (dmv): dmv says: The dmv office handles this. [1]\n\nSSA (ssa): ssa says: The ssa office handles this. [2]"
    meta = body["switchboard"]
    assert [c["expert"] for c in meta["citations"]] == ["dmv", "ssa"]
    assert [c["index"] for c in meta["citations"]] == [1, 2]
    assert [p["expert"] for p in meta["parts"]] == ["dmv", "ssa"]
    assert serving["store"].calls == [["dmv"], ["ssa"]]  # each expert answers from its own passages


def test_accurate_mode_takes_the_next_expert_when_one_of_the_top_two_fails(serving):
    serving["generator"].fail["ssa"] = GenerationError
    result = serving_chat.answer("licence and pension", model="auto:accurate")
    assert [p["expert"] for p in result.parts] == ["dmv", "va"]
    assert result.failover_from == [{"slug": "ssa", "reason": "generator_error"}]


def test_merge_keeps_markers_beyond_a_parts_citations_untouched():
    a = Answer(text="A [1] [2]", citations=[object(), object()])
    b = Answer(text="B [1] and [7]", citations=[object()])
    merged = accurate.merge_answers([("a", "Alpha", a, "[{index}]"), ("b", "Beta", b, "[{index}]")])
    assert merged.text == "Alpha (a): A [1] [2]\n\nBeta (b): B [3] and [7]"
    assert len(merged.citations) == 3


def test_an_experiment_arm_routes_with_its_router_version_and_is_reported(serving, client, monkeypatch, tmp_path):
    # v2 is v1's network with its outputs relabelled: "licence" goes to ssa under v2.
    RouterVersion.objects.create(version=2, path=str(tmp_path / "v1"), experts=["ssa", "dmv", "va"], embedding_model="fake",
                                 data_fingerprint="t2", metrics={"abstain_threshold": 0.5}, is_active=False)
    subjects = []
    monkeypatch.setattr(serving_chat, "assign", lambda subject: subjects.append(subject) or ArmAssignment(experiment_id=7, arm="treatment", router_version=2))
    response = chat(client, "how do I renew my licence", model="auto:fast", user="alice")
    meta = response.json()["switchboard"]
    assert meta["expert"] == "ssa"
    assert meta["router_version"] == 2
    assert meta["arm"] == "treatment"
    assert subjects == ["user:alice"]
    event = event_for(response.json()["id"])
    assert (event.experiment_id, event.arm, event.router_version) == (7, "treatment", 2)


def test_an_arm_pins_the_expert_version_that_answers(serving, monkeypatch):
    from experts.models import ExpertVersion

    dmv = Expert.objects.get(slug="dmv")
    ExpertVersion.objects.create(expert=dmv, version=1, status="active", system_prompt="v1 prompt")
    ExpertVersion.objects.create(expert=dmv, version=2, status="candidate", system_prompt="v2 prompt", adapter_path="/adapters/dmv-v2",
                                 base_model="tiny")
    monkeypatch.setattr(serving_chat, "assign", lambda subject: ArmAssignment(experiment_id=3, arm="treatment", expert_versions={"dmv": 2}))
    result = serving_chat.answer("how do I renew my licence", model="auto:fast")
    request = serving["generator"].requests[-1]
    assert request.system_prompt == "v2 prompt"
    assert request.adapter.name == "dmv-v2"
    assert result.expert_version == 2
    monkeypatch.setattr(serving_chat, "assign", lambda subject: None)
    serving_chat.answer("how do I renew my licence", model="auto:fast")
    assert serving["generator"].requests[-1].system_prompt == "v1 prompt"
    assert serving["generator"].requests[-1].adapter is None


def test_a_key_scoped_to_some_experts_is_routed_among_them_only(serving, client):
    from tests.factories import make_key

    auth = {"HTTP_AUTHORIZATION": f"Bearer {make_key('ssa and va', scopes=['ssa', 'va']).secret}"}
    ask = {"content_type": "application/json", **auth}
    body = {"messages": [{"role": "user", "content": "how do I renew my licence"}]}
    response = client.post("/v1/chat/completions", data=json.dumps({**body, "model": "auto:fast"}), **ask)
    assert response.json()["switchboard"]["expert"] in {"ssa", "va"}
    assert {e["slug"] for e in response.json()["switchboard"]["experts"]} <= {"ssa", "va"}
    denied = client.post("/v1/chat/completions", data=json.dumps({**body, "model": "dmv"}), **ask)
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "permission_denied"
    assert "dmv" not in [m["id"] for m in client.get("/v1/models", **auth).json()["data"]]
