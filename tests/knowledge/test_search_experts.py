"""Searching several experts' collections as one: router weights, widening when unsure, the flat mode."""

from __future__ import annotations

import pytest

from experts.models import Expert
from knowledge import ingest, search
from knowledge.ml import conversation as search_conversation
from knowledge.ml import routed
from knowledge.ml.routed import routing_weights
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


def test_by_default_the_others_share_whatever_probability_the_router_left():
    weights = routing_weights(["a", "b"], [0.9, 0.08], ["a", "b", "c"], threshold=routed.WIDEN_BELOW, power=1.0)

    assert weights == {"a": 0.9, "b": 0.08, "c": pytest.approx(0.02)}


def test_an_unsure_router_widens_to_the_others_with_the_leftover_probability():
    weights = routing_weights(["a"], [0.4], ["a", "b", "c", "d"], threshold=0.9, power=1.0)

    assert weights == {"a": 0.4, "b": pytest.approx(0.2), "c": pytest.approx(0.2), "d": pytest.approx(0.2)}


def test_a_sure_router_does_not_widen_below_the_threshold():
    assert routing_weights(["a", "b"], [0.95, 0.04], ["a", "b", "c"], threshold=0.9, power=1.0) == {"a": 0.95, "b": 0.04}


def test_the_weights_are_tempered_by_the_configured_power(monkeypatch):
    monkeypatch.setattr(routed, "WEIGHT_POWER", 0.5)
    weights = routing_weights(["a", "b"], [0.81, 0.09], ["a", "b", "c"], threshold=1.0)
    assert weights == {"a": pytest.approx(0.9), "b": pytest.approx(0.3), "c": pytest.approx(0.1 ** 0.5)}
    assert routing_weights(["a", "b"], [0.81, 0.09], ["a", "b", "c"], threshold=1.0, power=0.0) == {"a": 1.0, "b": 1.0, "c": 1.0}
    assert routing_weights(["a", "b"], [0.0, 0.0], ["a", "b"], threshold=1.0) == {"a": 1.0, "b": 1.0}


def test_without_weights_every_chosen_collection_counts_the_same():
    assert routing_weights(["a", "b"], None, ["a", "b", "c"], threshold=1.0) == {"a": 1.0, "b": 1.0}


@pytest.fixture
def three(kb, dmv, ssa):
    va = make_expert("va", "Veterans", chunk_size=300, chunk_overlap=50, public=False)
    ingest.ingest_files(dmv, [("renew.txt", b"Renew your driving licence online at the motor vehicles office.")])
    ingest.ingest_files(ssa, [("retire.txt", b"Apply for retirement benefits online with social security.")])
    ingest.ingest_files(va, [("gi.txt", b"Veterans apply online for education benefits under the GI Bill.")])
    return dmv, ssa, va


def test_routed_search_puts_the_confident_experts_chunks_first(three):
    dmv, ssa, _va = three

    hits = search.search_experts([ssa, dmv], "apply online benefits", weights=[0.9, 0.1])

    assert hits[0].payload["expert"] == "ssa"
    assert hits[0].collection == "expert_ssa"
    assert hits[0].dense_score > 0  # the cosine the generator's threshold reads


def test_a_near_even_split_lets_the_better_match_win(three):
    dmv, ssa, _va = three

    hits = search.search_experts([dmv, ssa], "retirement benefits social security", weights=[0.5, 0.45])

    assert hits[0].payload["expert"] == "ssa"


def test_routed_search_widens_to_experts_the_router_did_not_pick(three, monkeypatch):
    dmv, _ssa, _va = three
    monkeypatch.setattr(routed, "WIDEN_BELOW", 0.9)

    narrow = search.search_experts([dmv], "GI Bill education veterans", weights=[0.95], limit=3)
    wide = search.search_experts([dmv], "GI Bill education veterans", weights=[0.5], limit=3)

    assert {h.payload["expert"] for h in narrow} == {"dmv"}
    assert wide[0].payload["expert"] == "va"


def test_the_flat_mode_searches_every_active_expert(three):
    dmv, _ssa, va = three
    Expert.objects.filter(pk=va.pk).update(status="disabled")

    hits = search.search_experts([dmv], "apply online", flat=True, limit=5)

    assert {h.payload["expert"] for h in hits} == {"dmv", "ssa"}


@pytest.mark.parametrize("method", ["dense", "sparse", "hybrid"])
def test_each_method_works_across_collections(three, method):
    dmv, ssa, va = three

    hits = search.search_experts([dmv, ssa, va], "retirement benefits", weights=[0.2, 0.7, 0.1], method=method)

    assert hits[0].payload["expert"] == "ssa"


def test_no_experts_no_hits(kb):
    assert search.search_experts([], "anything") == []


def test_widening_never_reaches_past_the_callers_scope(three, monkeypatch):
    """An API key scoped to some experts must not get passages from the others, even when the router is unsure."""
    monkeypatch.setattr(routed, "WIDEN_BELOW", 1.0)
    dmv, _ssa, _va = three

    unscoped = search.search_experts([dmv], "veterans education benefits GI Bill", weights=[0.3], limit=10)
    scoped = search.search_experts([dmv], "veterans education benefits GI Bill", weights=[0.3], limit=10, allowed={"dmv", "ssa"})

    assert "va" in {h.payload["expert"] for h in unscoped}  # the leak this guards against
    assert {h.payload["expert"] for h in scoped} <= {"dmv", "ssa"}


def test_a_follow_up_is_searched_with_the_users_earlier_turns(three):
    """"Can I apply online?" fits both benefits pages; the conversation says which one the user means."""
    from knowledge.ml.conversation import SearchContext

    experts = list(three)

    def first(turns: tuple[str, ...], weight: float = search_conversation.CONTEXT_WEIGHT) -> str:
        context = SearchContext(turns=turns, vectors=search.get_encoder().encode(list(turns)), weight=weight)
        return search.search_experts(experts, "can I apply online", context=context)[0].payload["expert"]

    assert first(("I served in the army, what about the GI Bill for veterans",)) == "va"
    assert first(("my retirement from social security",)) == "ssa"
    alone = search.search_experts(experts, "can I apply online")[0].payload["expert"]
    assert first(("my retirement from social security",), weight=0.0) == alone  # weight 0: the question alone


def test_a_follow_up_searched_with_its_conversation_weighs_the_router_by_the_context_power(three, monkeypatch):
    """The earlier turns say which expert the conversation is about: there the router's weights count by CONTEXT_WEIGHT_POWER."""
    from knowledge.ml.conversation import SearchContext

    dmv, ssa, _va = three
    turns = ("I served in the army, what about the GI Bill for veterans",)
    context = SearchContext(turns=turns, vectors=search.get_encoder().encode(list(turns)), weight=search_conversation.CONTEXT_WEIGHT)
    monkeypatch.setattr(routed, "WEIGHT_POWER", 1.0)
    monkeypatch.setattr(routed, "CONTEXT_WEIGHT_POWER", 0.0)

    def first(**kwargs) -> str:
        return search.search_experts([dmv, ssa], "can I apply online", weights=[0.98, 0.01], **kwargs)[0].payload["expert"]

    assert first() == "dmv"  # asked alone: the router's 0.98 as it is
    assert first(context=context) == "va"  # with the conversation: every collection alike, the turns decide
    monkeypatch.setattr(routed, "CONTEXT_WEIGHT_POWER", 1.0)
    assert first(context=context) == "dmv"
