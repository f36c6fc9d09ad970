"""Two teams on one platform, for the cross-team matrix (``test_team_matrix.py``).

Team A (alice) owns ``a-desk``; team B (bob) owns ``b-desk`` and everything around it, each piece
carrying marker text that starts with ``MARK-B-``: the expert's name and description, a document,
versions and a training example, bob's answered question (its text, trace and the passage it cites),
unanswered questions whose only candidate is ``b-desk`` (one labelled by bob in the review queue),
bob's conversation and feedback, an import, a clustering run and its proposals, an experiment and
its alarm, jobs, a training run's per-expert figures and bob's API key. Team A has a promoted
discovery run (its reviewed labels) and a question of alice's; the scheduled checks then run as
beat runs them (re-clustering, knowledge refresh, evaluation, drift, load, SRM), so what they
write is in the world too. Serving is faked at its boundaries with ``tests/support/serving.py``'s
keyword encoder and generator and a store of its own, so chat answers
for real: a passage of ``b-desk`` carries a marker, so a B passage reaching A shows.

Principals: anonymous, alice, bob, staff (sam), A's key (alice's, scoped to ``a-desk``), A's key
after its user left team A (ann's), and a revoked key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from django.conf import settings as django_settings
from django.contrib.auth.models import Group, User
from django.core.cache import caches
from django.forms.models import model_to_dict
from django.test import Client

import encoders
from clients.models import ApiKey
from clients.services import revoke_key
from encoders import embedding_space
from experts.choices import VersionStatus
from experts.models import Expert, ExpertVersion, TrainingExample
from jobs.models import Job
from knowledge.ingest import upsert_document
from knowledge.models import Document
from knowledge.parsers import DocumentInput
from knowledge.stores import Hit
from labeling.models import Assignment, ClusteringRun, Embedding, Proposal, Query, ReviewAction, ReviewDecision
from labeling.proposals import ensure_proposal_stats
from routing.alarms.choices import AlarmKind
from routing.alarms.models import Alarm
from routing.experiments import services as experiments
from routing.experiments.models import Experiment
from routing.ml.router import RouterNet
from routing.models import Conversation, Feedback, RouterVersion, RoutingEvent, TrainingRun
from routing.schedules.scheduling import BY_NAME, ensure_schedules, fire, run_scheduled
from sbcommon.hashing import text_hash
from serving import chat as serving_chat
from serving import events, expert_answer, route
from tests.factories import make_expert, make_key, make_team, make_user
from tests.support.serving import DIM, FakeEncoder, FakeGenerator

MARK = "MARK-B-"
SLUGS = ["a-desk", "b-desk"]
KEYWORDS = {"alpha": 0, "bravo": 1}  # for the keyword encoder: "alpha" along a-desk's axis, "bravo" along b-desk's
# The scheduled jobs the world runs (not the router's retraining, nor retention, which finds nothing to delete).
SCHEDULED_CHECKS = ["recluster", "refresh_knowledge", "nightly_evaluation", "drift_check", "load_check", "srm_check"]


class MarkedStore:
    """``knowledge.search_experts`` stand-in: one passage per searched expert; b-desk's carries a marker."""

    def __init__(self):
        self.searched: list[str] = []

    def __call__(self, experts, question, limit=5, weights=None, query_vector=None, **kwargs):
        self.searched.extend(e.slug for e in experts)
        return [
            Hit(id=f"{e.slug}-1", score=1.0 - 0.1 * i, dense_score=0.9 - 0.1 * i,
                payload={"text": f"{MARK}passage of the bravo office." if e.slug == "b-desk" else f"The {e.slug} office handles this.",
                         "title": f"{e.slug} guide", "expert": e.slug, "document_id": i + 1})
            for i, e in enumerate(experts)
        ]


@dataclass
class TeamWorld:
    """Everything the matrix fills URLs with and compares: B's objects, the principals and their clients."""

    team_a: Group
    team_b: Group
    users: dict[str, User]
    secrets: dict[str, str]
    b_expert: Expert
    b_document: Document
    b_versions: list[ExpertVersion]
    b_example: TrainingExample
    b_answered: RoutingEvent
    b_unanswered: RoutingEvent
    b_conversation: Conversation
    b_feedback: Feedback
    b_run: ClusteringRun
    b_proposals: list[Proposal]
    b_experiment: Experiment
    b_alarm: Alarm
    b_jobs: dict[str, Job]
    b_key: ApiKey
    training_run: TrainingRun
    a_run: ClusteringRun
    a_answered: RoutingEvent
    schedule_pk: int
    schedule_name: str
    store: MarkedStore
    marker: str = MARK

    def client(self, principal: str) -> Client:
        """A client that asks as ``principal``: signed in (session) for users, with a bearer key for keys."""
        if principal in self.secrets:
            return Client(raise_request_exception=False, HTTP_AUTHORIZATION=f"Bearer {self.secrets[principal]}")
        client = Client(raise_request_exception=False)
        if principal in self.users:
            client.force_login(self.users[principal])
        return client

    def snapshot(self) -> dict[str, list[dict[str, Any]]]:
        """Team B's rows (and every row that names B's expert), as plain values, to compare before and after A's requests."""
        b_ids = [self.b_answered.request_id, *RoutingEvent.objects.filter(request_id__startswith="req_b_").values_list("request_id", flat=True)]
        team_field = {"team": self.team_b} if _has_field(Query, "team") else {"source__startswith": MARK}
        run_field = {"team": self.team_b} if _has_field(ClusteringRun, "team") else {"source__startswith": MARK}
        b_job = [j.pk for j in Job.objects.all() if j.params.get("expert") == "b-desk" or j.params.get("team") == self.team_b.pk
                 or j.created_by_id == self.users["bob"].pk]
        rows = {
            "expert": Expert.objects.filter(slug="b-desk"),
            "documents": Document.objects.filter(expert__slug="b-desk"),
            "versions": ExpertVersion.objects.filter(expert__slug="b-desk"),
            "examples": TrainingExample.objects.filter(expert__slug="b-desk"),
            "events": RoutingEvent.objects.filter(request_id__in=b_ids) | RoutingEvent.objects.filter(expert="b-desk"),
            "conversations": Conversation.objects.filter(user_id=self.users["bob"].pk) | Conversation.objects.filter(expert="b-desk"),
            "feedback": Feedback.objects.filter(request_id__in=b_ids) | Feedback.objects.filter(expert="b-desk"),
            "review_decisions": ReviewDecision.objects.filter(request_id__in=b_ids),
            "queries": Query.objects.filter(**team_field),
            "runs": ClusteringRun.objects.filter(**run_field),
            "proposals": Proposal.objects.filter(run__in=ClusteringRun.objects.filter(**run_field)) | Proposal.objects.filter(expert__slug="b-desk"),
            "labels": Query.objects.filter(label="b-desk"),
            "assignments": Assignment.objects.filter(run__in=ClusteringRun.objects.filter(**run_field)),
            "review_actions": ReviewAction.objects.filter(run__in=ClusteringRun.objects.filter(**run_field)),
            "experiments": Experiment.objects.filter(expert__slug="b-desk"),
            "alarms": Alarm.objects.filter(pk=self.b_alarm.pk),
            "jobs": Job.objects.filter(pk__in=b_job),
            "b_keys": ApiKey.objects.filter(created_by=self.users["bob"]),
        }
        out = {name: sorted((_values(row) for row in qs.distinct()), key=lambda v: str(v.get("id"))) for name, qs in rows.items()}
        # A key anyone else scopes to B's expert reaches it: none may appear.
        out["keys_scoped_to_b"] = sorted(str(k.pk) for k in ApiKey.objects.exclude(created_by=self.users["bob"]) if "b-desk" in (k.scopes or []))
        return out


def _values(row) -> dict[str, Any]:
    values = model_to_dict(row)
    values["id"] = row.pk
    values.pop("updated_at", None)
    return {k: (v.pk if hasattr(v, "pk") else v) for k, v in values.items()}


def _has_field(model, name: str) -> bool:
    return any(f.name == name for f in model._meta.get_fields())


def _router(tmp_path) -> RouterVersion:
    """An active router over a-desk and b-desk, one prototype on each's axis, abstaining below similarity 0.5."""
    torch.manual_seed(0)
    model = RouterNet(input_dim=DIM, n_experts=len(SLUGS), use_conv=False, hidden_dim=128, prototypes_per_expert=1, prototype_weight=20.0)
    with torch.no_grad():
        model.gate[-1].weight.zero_()
        model.gate[-1].bias.zero_()
    model.set_prototypes([torch.eye(DIM)[i : i + 1] for i in range(len(SLUGS))])
    model.save(tmp_path / "v1")
    return RouterVersion.objects.create(
        version=1, path=str(tmp_path / "v1"), experts=SLUGS, embedding_model=embedding_space(), data_fingerprint="test",
        metrics={"abstain_threshold": 0.5}, is_active=True,
    )


def _ask(client: Client, content: str, **extra: Any):
    body = {"model": "auto", "messages": [{"role": "user", "content": content}], **extra}
    response = client.post("/v1/chat/completions", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()


def _discovery(team: Group, user: User) -> tuple[ClusteringRun, list[Proposal], dict[str, Job]]:
    """Team B's import and clustering run: two proposals over marked queries (embeddings inserted, no encoder)."""
    source = f"{MARK}payroll-log.csv"
    team_kw = {"team": team} if _has_field(Query, "team") else {}
    run_kw = {"team": team} if _has_field(ClusteringRun, "team") else {}
    run = ClusteringRun.objects.create(model=django_settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=2, fingerprint="team-b",
                                       n_queries=7, n_topics=2, noise_share=1 / 7, source=source, **run_kw)
    rng = np.random.default_rng(0)
    proposals = []
    for index, (name, axis) in enumerate([(f"{MARK}proposal payroll", 0), (f"{MARK}proposal pensions", 1)]):
        proposal = Proposal.objects.create(run=run, index=index, name=name, keywords=[f"{MARK}keyword"], representatives=[])
        texts = [f"{MARK}query {name} {i}" for i in range(3)]
        for text in texts:
            Assignment.objects.create(run=run, query=_query(text, source, axis, rng, team_kw), topic=index, proposal=proposal)
        Proposal.objects.filter(pk=proposal.pk).update(representatives=texts, size=len(texts))
        proposals.append(proposal)
    Assignment.objects.create(run=run, query=_query(f"{MARK}query unassigned", source, 5, rng, team_kw), topic=-1, proposal=None)
    ensure_proposal_stats(run)
    jobs = {
        "import": Job.objects.create(kind="import_queries", key=f"import_queries:team-b:{source}", title=f"Import {source}", status="succeeded",
                                     params={"name": source, "source": source, "team": team.pk}, result={"imported": 7, "source": source},
                                     created_by=user, task_name="labeling.tasks.import_queries"),
        "discover": Job.objects.create(kind="discover", key="discover:team-b", title=f"Discover experts in {source} of {team.name}", status="succeeded",
                                       params={"source": source, "team": team.pk}, result={"run": run.pk}, created_by=user,
                                       task_name="labeling.tasks.discover"),
    }
    return run, [Proposal.objects.get(pk=p.pk) for p in proposals], jobs


def _promoted_run(team: Group, expert: Expert) -> ClusteringRun:
    """Team A's reviewed discovery run, promoted to ``expert``: the labels the router trains on (vectors on a-desk's axis)."""
    team_kw = {"team": team} if _has_field(Query, "team") else {}
    run = ClusteringRun.objects.create(model=embedding_space(), eps=0.2, min_samples=3, n_experts=1, fingerprint="team-a", n_queries=3, n_topics=1,
                                       status="promoted", **({"team": team} if _has_field(ClusteringRun, "team") else {}))
    proposal = Proposal.objects.create(run=run, index=0, name="Alpha questions", status="promoted", expert=expert, size=3)
    vector = FakeEncoder(KEYWORDS, fold_case=True).encode(["alpha"])[0]
    for i in range(3):
        text = f"alpha office question {i}"
        Embedding.objects.get_or_create(model=embedding_space(), text_hash=text_hash(text), defaults={"vector": vector.astype("<f4").tobytes()})
        query = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash(f"team-a:{text}"), source="alpha-log", label=expert.slug,
                                     split="train", **team_kw)
        Assignment.objects.create(run=run, query=query, topic=0, proposal=proposal)
    return run


def _query(text: str, source: str, axis: int, rng, team_kw: dict[str, Any]) -> Query:
    h = text_hash(text)
    vector = np.zeros(16, dtype=np.float32)
    vector[axis] = 1.0
    vector += 0.05 * rng.normal(size=16).astype(np.float32)
    vector /= np.linalg.norm(vector)
    Embedding.objects.get_or_create(model=django_settings.EMBEDDING_MODEL, text_hash=h, defaults={"vector": vector.astype("<f4").tobytes()})
    return Query.objects.create(text=text, text_hash=h, row_hash=text_hash(f"team-b:{source}:{text}"), source=source, **team_kw)


@pytest.fixture
def team_world(db, settings, tmp_path, monkeypatch) -> Iterator[TeamWorld]:
    """Teams A and B with B's marked data everywhere, chat served by fakes, and the seven principals."""
    settings.CHAT_API_REQUIRE_AUTH = False  # anonymous callers reach chat and ask public experts only
    settings.STORE_QUESTION_TEXT = True
    settings.EVENTS_SYNC = True
    settings.ROUTER_DIR = tmp_path
    settings.ROUTER_LOAD_WINDOW = 10
    settings.ROUTER_LOAD_PENALTY = 0.0
    settings.ROUTER_CAPACITY = 1.0
    encoder, store = FakeEncoder(KEYWORDS, fold_case=True), MarkedStore()
    monkeypatch.setattr(route, "get_encoder", lambda *a, **k: encoder)
    monkeypatch.setattr(serving_chat, "get_encoder", lambda *a, **k: encoder)
    monkeypatch.setattr(serving_chat.knowledge, "search_experts", store)
    monkeypatch.setattr(expert_answer, "get_generator", lambda *a, **k: FakeGenerator())
    monkeypatch.setattr(serving_chat, "assign", lambda subject: None)  # experiments assign no arm: answers stay comparable
    route._router_cache.clear()
    caches[settings.BREAKER_CACHE].clear()

    team_a, team_b = make_team("Team A"), make_team("Team B")
    alice, ann, bob = make_user("alice", teams=(team_a,)), make_user("ann", teams=(team_a,)), make_user("bob", teams=(team_b,))
    sam = make_user("sam", staff=True)
    a_expert = make_expert("a-desk", "Alpha Desk", description="Team A's desk.", team=team_a, public=True)
    b_expert = make_expert("b-desk", f"{MARK}name Payroll Desk", description=f"{MARK}description", team=team_b, public=False)
    version = _router(tmp_path)

    b_document, _ = upsert_document(b_expert, DocumentInput(external_id="salaries.txt", title=f"{MARK}document title",
                                                                      text=f"Salary bands {MARK}document text."))
    b_versions = [
        ExpertVersion.objects.create(expert=b_expert, version=1, status=VersionStatus.ACTIVE, system_prompt=f"{MARK}prompt one"),
        ExpertVersion.objects.create(expert=b_expert, version=2, status=VersionStatus.CANDIDATE, system_prompt=f"{MARK}prompt two"),
    ]
    b_example = TrainingExample.objects.create(expert=b_expert, question=f"{MARK}example question", answer=f"{MARK}example answer",
                                               fingerprint=text_hash(f"{MARK}example"), created_by=bob)

    # Bob asks (his conversation, his answered question and its trace), then judges the answer.
    bob_client = Client()
    bob_client.force_login(bob)
    answer = _ask(bob_client, f"{MARK}question when does the bravo office open", conversation_id="conv_bob_payroll")
    assert answer["switchboard"]["expert"] == "b-desk", answer
    feedback = bob_client.post("/api/v1/feedback", data=json.dumps({"response_id": answer["id"], "rating": "down", "comment": f"{MARK}feedback"}),
                               content_type="application/json")
    assert feedback.status_code == 201, feedback.content
    events.flush()
    b_answered = RoutingEvent.objects.get(request_id=answer["id"])
    b_unanswered = RoutingEvent.objects.create(
        request_id="req_b_unanswered", mode="auto", router_version=1, expert="", experts=[{"slug": "b-desk", "score": 0.31}],
        question=f"{MARK}unanswered question about payslips", abstained=True, answer_source="none", user_id=bob.pk, status_code=200,
        trace={"evidence": {"routed": True, "abstained": True}, "answer": f"{MARK}unanswered answer"},
    )

    # Bob's team kept asking about payslips and no expert answered. Then the scheduled checks run as beat runs
    # them (the re-clustering finds the dense group no expert covers, next to team A's reviewed labels).
    for i in range(1, 8):
        RoutingEvent.objects.create(
            request_id=f"req_b_unanswered_{i}", mode="auto", router_version=1, expert="", experts=[{"slug": "b-desk", "score": 0.3}],
            question=f"{MARK}unanswered question about payslips {i}", abstained=True, answer_source="none", user_id=bob.pk,
        )
    a_run = _promoted_run(team_a, a_expert)
    with monkeypatch.context() as patch:
        patch.setattr(encoders, "get_encoder", lambda *a, **k: encoder)
        for name in SCHEDULED_CHECKS:
            run_scheduled(fire(name).pk)

    # Bob labels one of them in the review queue: the next router training learns it, wherever the platform keeps it.
    bob_client.post("/review/", {"request_id": "req_b_unanswered_1", "expert": "b-desk"})
    # Alice asks too (her own trace, read for what it may show of B's).
    alice_client = Client()
    alice_client.force_login(alice)
    a_answered = RoutingEvent.objects.get(request_id=_ask(alice_client, "what does the alpha office do")["id"])

    b_run, b_proposals, b_jobs = _discovery(team_b, bob)
    b_jobs["index"] = Job.objects.create(kind="index_documents", key="index:b-desk", title=f"Index {MARK}name documents", status="failed",
                                         params={"expert": "b-desk"}, error=f"{MARK}job error", created_by=bob,
                                         task_name="knowledge.tasks.index_expert_documents")

    settings.GENERATOR = "transformers"  # an experiment of two prompts is refused by the extractive generator, which reads none
    b_experiment = experiments.create_experiment(kind="expert", expert=b_expert, name=f"{MARK}experiment prompts", control_version=1,
                                                 treatment_version=2, user=bob)
    settings.GENERATOR = "extractive"
    alarm_kw = {"experts": ["b-desk"]} if _has_field(Alarm, "experts") else {}
    b_alarm = Alarm.objects.create(kind=AlarmKind.SRM, key=f"srm:{b_experiment.pk}", subject=str(b_experiment.pk),
                                   message=f"{MARK}alarm: the arms of experiment {b_experiment.pk} are unbalanced",
                                   proposal=f"{MARK}alarm proposal", **alarm_kw)

    training_run = TrainingRun.objects.create(
        params={"epochs": 2}, n_train=10, n_val=4, router_version=version,
        history=[{"epoch": 1, "train_loss": 1.0, "val_loss": 1.1, "val_accuracy": 0.5}, {"epoch": 2, "train_loss": 0.5, "val_loss": 0.6, "val_accuracy": 0.75}],
        metrics={"val": {"accuracy": 0.75}, "diagnostics": {"confusion": [[2, 0], [1, 1]], "per_expert": {
            "a-desk": {"precision": 0.67, "recall": 1.0, "f1": 0.8, "support": 2}, "b-desk": {"precision": 1.0, "recall": 0.5, "f1": 0.67, "support": 2}}}},
    )

    a_key = make_key("alice's front end", created_by=alice, scopes=["a-desk"], rate_limit_per_minute=0)
    removed_key = make_key("ann's front end", created_by=ann, scopes=["a-desk"], rate_limit_per_minute=0)
    ann.groups.remove(team_a)
    revoked_key = make_key("alice's old front end", created_by=alice, scopes=["a-desk"], rate_limit_per_minute=0)
    revoke_key(revoked_key.key)
    b_key = make_key(f"{MARK}key of bob", created_by=bob, scopes=["b-desk"], rate_limit_per_minute=0).key

    ensure_schedules()
    from django_celery_beat.models import PeriodicTask

    world = TeamWorld(
        team_a=team_a, team_b=team_b, users={"alice": alice, "bob": bob, "sam": sam},
        secrets={"a_key": a_key.secret, "a_key_after_removal": removed_key.secret, "revoked_key": revoked_key.secret},
        b_expert=b_expert, b_document=b_document, b_versions=b_versions, b_example=b_example, b_answered=b_answered, b_unanswered=b_unanswered,
        b_conversation=Conversation.objects.get(conversation_id="conv_bob_payroll"), b_feedback=Feedback.objects.get(request_id=answer["id"]),
        b_run=b_run, b_proposals=b_proposals, b_experiment=b_experiment, b_alarm=b_alarm, b_jobs=b_jobs, b_key=b_key,
        training_run=training_run, a_run=a_run, a_answered=a_answered, schedule_pk=PeriodicTask.objects.order_by("pk").values_list("pk", flat=True).first(),
        schedule_name=next(iter(BY_NAME)), store=store,
    )
    store.searched.clear()
    yield world
    route._router_cache.clear()
    caches[settings.BREAKER_CACHE].clear()
