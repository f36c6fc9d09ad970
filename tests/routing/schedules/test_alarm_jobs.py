"""The drift and re-clustering jobs: reports stored, alarms with proposals raised, nothing promoted."""

from __future__ import annotations

import numpy as np
import pytest

from experts.models import Expert
from jobs.models import Job
from routing.alarms.models import Alarm, DriftReport
from routing.models import RouterVersion, RoutingEvent
from routing.schedules import routines as jobs
from tests.factories import make_expert

pytestmark = pytest.mark.django_db
DIM = 16


class AxisEncoder:
    """Questions about licences point along axis 0, pensions along 1, anything else along axis 7."""

    def encode(self, texts, batch_size=64):
        rng = np.random.default_rng(len(texts))
        out = []
        for t in texts:
            v = np.zeros(DIM, dtype=np.float32)
            v[0 if "licence" in t else 1 if "pension" in t else 7] = 1.0
            out.append(v + 0.1 * rng.normal(size=DIM).astype(np.float32))
        return np.stack(out)


@pytest.fixture
def trained(settings, monkeypatch):
    """A promoted run whose labelled questions are about licences (dmv) and pensions (ssa), embeddings cached."""
    from labeling.choices import ProposalStatus, RunStatus
    from labeling.models import Assignment, ClusteringRun, Embedding, Proposal, Query
    from sbcommon.hashing import text_hash

    monkeypatch.setattr("encoders.get_encoder", lambda *a, **k: AxisEncoder())
    run = ClusteringRun.objects.create(model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=2, fingerprint="t", status=RunStatus.PROMOTED)
    encoder = AxisEncoder()
    for index, (slug, word) in enumerate([("dmv", "licence"), ("ssa", "pension")]):
        expert = make_expert(slug, slug, public=False)
        proposal = Proposal.objects.create(run=run, index=index, name=slug, status=ProposalStatus.PROMOTED, expert=expert)
        texts = [f"{word} question {j}" for j in range(40)]
        for text, v in zip(texts, encoder.encode(texts), strict=True):
            q = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash("r" + text), source="t")
            Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=q.text_hash, vector=(v / np.linalg.norm(v)).astype("<f4").tobytes())
            Assignment.objects.create(run=run, query=q, topic=index, proposal=proposal)
    RouterVersion.objects.create(version=1, path="/nowhere", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="f", is_active=True,
                                 metrics={"abstain_target_recall": 0.95})
    return run


def _ask(questions):
    RoutingEvent.objects.bulk_create([RoutingEvent(request_id=f"q{i}", mode="auto", expert="dmv", question=q) for i, q in enumerate(questions)])


def _job(**params):
    return Job.objects.create(kind="test", key="test", title="test", params=params)


def test_recent_questions_like_the_training_ones_are_not_drift(trained):
    _ask([f"licence renewal {i}" for i in range(30)] + [f"pension age {i}" for i in range(30)])
    result = jobs.drift_check(_job(), jobs.JobReporter())
    assert result["drifted"] is False
    assert DriftReport.objects.get().n_recent == 60
    assert not Alarm.objects.exists()


def test_a_new_topic_is_drift_with_a_retraining_proposal(trained):
    _ask([f"passport photo {i}" for i in range(60)])
    result = jobs.drift_check(_job(), jobs.JobReporter())
    assert result["drifted"] is True
    alarm = Alarm.objects.get(kind="drift")
    assert "retrain the router" in alarm.proposal


def test_too_few_recent_questions_is_recorded_not_guessed(trained):
    _ask(["licence one", "pension two"])
    assert "not enough data" in jobs.drift_check(_job(), jobs.JobReporter())["reason"]


def test_recluster_proposes_a_new_expert_for_an_uncovered_group(trained, monkeypatch):
    sent = []
    monkeypatch.setattr("labeling.services.enqueue_discovery", lambda **kw: sent.append(kw) or _job())
    _ask([f"licence renewal {i}" for i in range(20)] + [f"passport photo {i}" for i in range(15)])
    result = jobs.recluster(_job(), jobs.JobReporter())
    assert [c["size"] for c in result["uncovered_clusters"]] == [15]
    alarm = Alarm.objects.get(kind="new_expert")
    assert "passport photo" in alarm.proposal
    assert sent == [{"source": "", "team": None}]
    assert Expert.objects.count() == 2  # proposed, never created


def test_recluster_starts_one_run_per_team_with_enough_queries(trained, monkeypatch):
    from django.contrib.auth.models import Group

    from labeling.models import Query

    sent = []
    monkeypatch.setattr("labeling.services.enqueue_discovery", lambda **kw: sent.append(kw) or _job())
    alpha, beta = Group.objects.create(name="Alpha"), Group.objects.create(name="Beta")
    for team, n in ((alpha, jobs.MIN_QUERIES_TO_RECLUSTER), (beta, jobs.MIN_QUERIES_TO_RECLUSTER - 1)):
        Query.objects.bulk_create([Query(text=f"{team.name} {i}", text_hash=f"{team.name}{i}", row_hash=f"{team.name}r{i}", source="t", team=team)
                                   for i in range(n)])
    result = jobs.recluster(_job(), jobs.JobReporter())
    assert sorted((kw["team"].name if kw["team"] else "") for kw in sent) == ["", "Alpha"]
    assert len(result["discovery_jobs"]) == 2


def test_a_new_expert_alarm_names_its_nearest_expert_only_when_every_question_is_that_teams():
    team_of = {"a-desk": 1, "a-other": 1, "b-desk": 2, "shared": None}
    assert jobs._readers_of([{"a-desk"}, {"a-other"}], "a-desk", team_of) == ["a-desk"]
    assert jobs._readers_of([{"a-desk"}, {"b-desk"}], "a-desk", team_of) == []  # B's question would show to A
    assert jobs._readers_of([{"a-desk"}, set()], "a-desk", team_of) == []  # a question no expert owns: staff only
    assert jobs._readers_of([{"shared"}], "shared", team_of) == ["shared"]  # a single-team install: experts with no team
    assert jobs._readers_of([{"a-desk"}], None, team_of) == []
