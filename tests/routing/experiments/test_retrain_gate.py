"""Scheduled retraining activates a new router only when it beats the active one on the same held-out split."""

from __future__ import annotations

import numpy as np
import pytest

from routing import services
from routing.models import RouterVersion
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


class FakeEncoder:
    name = "fake"

    def encode(self, texts, batch_size=64):
        return np.zeros((len(texts), 16), dtype=np.float32)


@pytest.fixture
def labelled(settings, tmp_path, monkeypatch):
    """A promoted run of two experts whose embeddings are cached (separable: any router gets them all right)."""
    from labeling.choices import ProposalStatus, RunStatus
    from labeling.models import Assignment, ClusteringRun, Embedding, Proposal, Query
    from sbcommon.hashing import text_hash

    settings.ROUTER_DIR = tmp_path
    monkeypatch.setattr("labeling.services.get_encoder", lambda *a, **k: FakeEncoder())
    rng = np.random.default_rng(0)
    run = ClusteringRun.objects.create(model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=2, fingerprint="t", status=RunStatus.PROMOTED)
    for index, slug in enumerate(["dmv", "ssa"]):
        expert = make_expert(slug, slug, public=False)
        proposal = Proposal.objects.create(run=run, index=index, name=slug, status=ProposalStatus.PROMOTED, expert=expert)
        for j in range(30):
            text = f"{slug} question {j}"
            v = np.zeros(16, dtype=np.float32)
            v[index] = 1.0
            v += 0.1 * rng.normal(size=16).astype(np.float32)
            v /= np.linalg.norm(v)
            q = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash("r" + text), source="t")
            Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=q.text_hash, vector=v.astype("<f4").tobytes())
            Assignment.objects.create(run=run, query=q, topic=index, proposal=proposal)
    return run


PARAMS = {"epochs": 3, "seed": 0, "hidden_dim": 128}


def test_the_first_router_activates_even_under_the_if_better_policy(labelled):
    version = services.train_router_from_labels(PARAMS, activate="if_better")
    assert version.is_active
    assert version.metrics["activation"]["reason"] == "no active router"


def test_a_router_that_does_not_beat_the_active_one_is_kept_as_a_candidate_with_the_reason(labelled):
    first = services.train_router_from_labels(PARAMS)
    second = services.train_router_from_labels({**PARAMS, "seed": 1}, activate="if_better")
    assert not second.is_active
    assert RouterVersion.objects.get(is_active=True).pk == first.pk
    verdict = second.metrics["activation"]
    # Both separate the two experts perfectly on the same held-out questions: equal is not better.
    assert verdict["candidate_accuracy"] == verdict["active_accuracy"] == 1.0
    assert verdict["paired"] == {"new_only": 0, "active_only": 0, "p_value": 1.0}  # they never disagree
    assert "only the new one routes 0 of them right, only the active one 0 (McNemar's exact p = 1)" in verdict["reason"]
    assert "kept as a candidate" in verdict["reason"]
    assert f"active v{first.version}" in verdict["reason"]
    # Rerunning on the same data finds the candidate instead of training a third router.
    again = services.train_router_from_labels({**PARAMS, "seed": 1}, activate="if_better")
    assert again.pk == second.pk
    assert RouterVersion.objects.count() == 2


def test_the_default_policy_still_activates_every_new_router(labelled):
    services.train_router_from_labels(PARAMS)
    second = services.train_router_from_labels({**PARAMS, "seed": 1})
    assert second.is_active


def test_a_router_experiment_scores_both_arms_on_the_reviewed_questions(labelled):
    from labeling.models import Assignment, ReviewDecision
    from routing.experiments import services as experiments

    services.train_router_from_labels(PARAMS)
    services.train_router_from_labels({**PARAMS, "seed": 1}, activate="if_better")
    for i, a in enumerate(Assignment.objects.select_related("proposal__expert")[:10]):
        ReviewDecision.objects.create(request_id=f"r{i}", reason="low_confidence", routed_expert="", expert=a.proposal.expert, query_id=a.query_id)
    exp = experiments.create_experiment(kind="router", control_version=1, treatment_version=2)
    offline = experiments.offline_metrics(exp)
    assert offline["control"]["n"] == offline["treatment"]["n"] == 10
    assert offline["control"]["accuracy"] == 1.0
    assert offline["treatment"]["accuracy"] == 1.0


def test_every_version_holds_out_the_gate_and_the_gate_decides(labelled):
    from routing.models import TrainingRun

    first = services.train_router_from_labels(PARAMS)
    gate = first.metrics["gate"]
    assert gate["source"] == "a hashed 10% of the labelled queries"
    assert gate["n"] > 0
    assert gate["accuracy"] == 1.0
    run = TrainingRun.objects.get(router_version=first)
    assert run.n_train + run.n_val + gate["n"] == 60  # the gate neither trained nor validated
    second = services.train_router_from_labels({**PARAMS, "seed": 1}, activate="if_better")
    verdict = second.metrics["activation"]
    # The held-out count is the gate's own, counted here from the hash (not the validation split's, which it can equal by chance).
    from labeling.models import Query

    assert verdict["n_heldout"] == gate["n"] == sum(services.in_gate(pk) for pk in Query.objects.values_list("pk", flat=True))
    assert "neither trained nor tuned on" in verdict["reason"]


def test_the_gate_is_the_sources_test_split_when_it_has_one_else_a_stable_hash():
    from labeling.selectors import LabelledQuery

    def q(i, expert="a", split=""):
        return LabelledQuery(query_id=i, text="", expert=expert, split=split, conversation="")

    with_test = [q(1, split="train"), q(2, split="test"), q(3, split="val"), q(4, split="test")]
    assert services.gate_split(with_test) == ([1, 3], "the source's test split")
    many = [q(i) for i in range(1, 401)]
    gate, source = services.gate_split(many)
    assert source == "a hashed 10% of the labelled queries"
    assert 20 <= len(gate) <= 60
    assert services.gate_split(list(reversed(many)))[0] == sorted(399 - i for i in gate)  # membership follows the query id
    few = [q(i, expert="small") for i in range(1, services.GATE_MIN_PER_EXPERT)]
    assert services.gate_split(few)[0] == []  # an expert this small needs every query to be learned


def test_without_gate_questions_the_candidate_is_kept_with_the_reason(labelled, monkeypatch):
    services.train_router_from_labels(PARAMS)
    monkeypatch.setattr(services, "in_gate", lambda query_id, share=services.GATE_SHARE: False)
    second = services.train_router_from_labels({**PARAMS, "seed": 1}, activate="if_better")
    assert not second.is_active
    assert "no held-out questions" in second.metrics["activation"]["reason"]


def test_a_router_trained_to_be_kept_as_a_candidate_never_goes_live_by_itself(labelled):
    first = services.train_router_from_labels(PARAMS, activate="never")
    assert not first.is_active  # not even the first one: a person switches to it
    assert "kept as a candidate" in first.metrics["activation"]["reason"]
    assert not RouterVersion.objects.filter(is_active=True).exists()


def test_the_console_job_passes_its_activation_policy_which_is_not_a_training_parameter(labelled):
    from jobs.services import JobReporter
    from routing.tasks import _train

    class FakeJob:
        pk = None
        params = {**PARAMS, "activation": "never"}

    result = _train(FakeJob(), JobReporter())
    version = RouterVersion.objects.get(version=result["router_version"])
    assert not version.is_active
    run = version.training_runs.get()
    assert "activation" not in run.params
    assert run.params["epochs"] == PARAMS["epochs"]


def test_an_unknown_activation_policy_fails_before_training(labelled):
    from jobs.services import JobFailed

    with pytest.raises(JobFailed, match="unknown activation policy"):
        services.train_router_from_labels(PARAMS, activate="sometimes")


@pytest.mark.parametrize(("candidate", "active", "expected"), [
    ([True] * 8 + [False] * 2, [False] * 8 + [True] * 2, {"new_only": 8, "active_only": 2, "p_value": 0.1094}),
    ([True, True, False], [True, False, False], {"new_only": 1, "active_only": 0, "p_value": 1.0}),  # one question proves nothing
    ([True] * 10, [False] * 10, {"new_only": 10, "active_only": 0, "p_value": 0.002}),
])
def test_the_paired_comparison_counts_the_questions_only_one_router_gets_right(candidate, active, expected):
    assert services._mcnemar(candidate, active) == expected
