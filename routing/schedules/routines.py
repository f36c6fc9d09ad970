"""The work each scheduled job does, as ``(job, reporter) -> result`` functions run by ``run_job``.

``scheduling.DEFAULTS`` lists each schedule with its function here.

Each is idempotent: it reads the current state and does what is missing (training with an
unchanged fingerprint is a no-op, indexing only touches pending documents, alarms are refreshed in
place rather than duplicated), so a rerun after a worker restart does no harm.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict
from datetime import timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from encoders import embedding_space
from experts.models import Expert
from experts.selectors import active_experts
from jobs.models import Job
from jobs.services import JobFailed, JobReporter

from ..alarms import services as alarm_services
from ..alarms.choices import AlarmKind
from ..alarms.models import DriftReport, EvaluationSnapshot
from ..experiments import services as experiment_services
from ..experiments.choices import ExperimentStatus
from ..experiments.models import Experiment
from ..ml import drift as drift_ml
from ..models import Feedback, RouterVersion, RoutingEvent
from ..retention import purge_expired_conversations, purge_old_events


def retrain_router(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Train on the reviewed labels; activate only when the new router beats the active one on held-out questions."""
    from .. import services as routing_services

    version = routing_services.train_router_from_labels(job.params.get("train", {}), reporter=reporter, job_id=job.pk, activate="if_better")
    activation = (version.metrics or {}).get("activation", {})
    if not version.is_active:
        alarm_services.raise_alarm(
            AlarmKind.ROUTER, "router:candidate", f"v{version.version}", f"Router v{version.version} was trained but not activated",
            activation.get("reason", ""), {"version": version.version, **activation},
        )
    return {"router_version": version.version, "activated": version.is_active, "reason": activation.get("reason", "unchanged data: nothing trained")}


def _labelled(held_out: bool) -> list[Any]:
    """The promoted experts' labelled questions: the held-out ones (split 'test'), or those routers train on."""
    from labeling import selectors as labeling_selectors

    runs = labeling_selectors.latest_promoted_runs()
    return [e for e in labeling_selectors.routing_examples(runs) if (e.split == "test") == held_out] if runs else []


def _expert_centroids(limit: int) -> tuple[list[str], np.ndarray]:
    """Each routable expert's normalised mean embedding over its labelled training questions."""
    from labeling.services import load_embeddings

    examples = _labelled(held_out=False)[: limit * 20]
    if not examples:
        return [], np.zeros((0, 1), dtype=np.float32)
    x = load_embeddings([e.query_id for e in examples], embedding_space())
    slugs = sorted({e.expert for e in examples})
    means = [x[[i for i, e in enumerate(examples) if e.expert == slug]].mean(axis=0) for slug in slugs]
    return slugs, np.stack([mean / max(float(np.linalg.norm(mean)), 1e-12) for mean in means]).astype(np.float32)


# A team with fewer imported queries gets no monthly run: discovery refuses fewer than 10 (labeling.services.discover).
MIN_QUERIES_TO_RECLUSTER = 10


def recluster(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Find dense clusters of recent questions that no expert covers (an alarm proposing a new expert each),
    and start a discovery run over the query log for review. Nothing is promoted automatically."""
    from encoders import get_encoder
    from labeling.selectors import teams_with_queries
    from labeling.services import enqueue_discovery

    since = timezone.now() - timedelta(days=int(job.params.get("window_days", 30)))
    recent = _recent_questions(since, int(job.params.get("sample", 2000))) if settings.STORE_QUESTION_TEXT else []
    questions = [question for question, _ in recent]
    team_of = dict(Expert.objects.values_list("slug", "team_id"))
    proposals = []
    if len(questions) >= 8:
        slugs, centroids = _expert_centroids(int(job.params.get("sample", 2000)))
        x = np.asarray(get_encoder().encode(questions), dtype=np.float32)
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        for cluster in drift_ml.uncovered_clusters(x, centroids if slugs else np.zeros((0, x.shape[1]), dtype=np.float32)):
            examples = [questions[i] for i in cluster.members[:5]]
            nearest = slugs[cluster.nearest_expert] if cluster.nearest_expert is not None else None
            key = "new_expert:" + hashlib.sha256(" ".join(sorted(examples)).encode()).hexdigest()[:16]
            alarm_services.raise_alarm(
                AlarmKind.NEW_EXPERT, key, nearest or "",
                f"{len(cluster.members)} recent questions form a dense group no expert covers"
                + (f" (closest: {nearest}, similarity {cluster.similarity:.2f})" if nearest else ""),
                "Review these questions in Discovery and promote them as a new expert (with documents), or label them to an existing one. "
                "Examples: " + " | ".join(q[:120] for q in examples),
                {"size": len(cluster.members), "nearest_expert": nearest, "similarity": cluster.similarity, "examples": examples},
                # Its examples are recent questions: it names the nearest expert only when they are all that expert's team's.
                experts=_readers_of([recent[i][1] for i in cluster.members], nearest, team_of),
            )
            proposals.append({"size": len(cluster.members), "nearest_expert": nearest, "similarity": round(cluster.similarity, 3)})
        reporter.log(f"{len(questions)} recent questions: {len(proposals)} uncovered dense cluster(s)")
    # One run per team (and one for staff-only queries): a run clusters its own team's queries only.
    children = [enqueue_discovery(source="", team=team) for team in teams_with_queries(at_least=MIN_QUERIES_TO_RECLUSTER)]
    for child in children:
        reporter.log(f"discovery job {child.pk} enqueued: its proposals wait for review")
    if not children:
        reporter.log(f"no team has {MIN_QUERIES_TO_RECLUSTER} imported queries: no discovery run started")
    return {"recent_questions": len(questions), "uncovered_clusters": proposals,
            "discovery_job": children[0].pk if children else None, "discovery_jobs": [c.pk for c in children]}


def refresh_knowledge(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Bring every knowledge base up to date with its documents.

    A document whose content changed is stored with ``indexed_at`` cleared (``knowledge.ingest.
    upsert_document``), and a failed one keeps its error: both are pending, and ``enqueue_index``
    (one active job per expert) indexes them. Collections built with another embedding model are
    rebuilt. Documents are uploads, not live links, so there is no remote source to re-fetch.
    """
    from knowledge.models import Document
    from knowledge.services import enqueue_index, enqueue_reembed_stale

    jobs = {}
    for expert in active_experts():
        pending = Document.objects.filter(expert=expert, indexed_at__isnull=True).count()
        if pending:
            jobs[expert.slug] = enqueue_index(expert).pk
            reporter.log(f"{expert.slug}: {pending} document(s) to index (job {jobs[expert.slug]})")
    rebuilds = [j.pk for j in enqueue_reembed_stale()]
    if rebuilds:
        reporter.log(f"{len(rebuilds)} collection(s) built with another embedding model: rebuild jobs {rebuilds}")
    return {"index_jobs": jobs, "rebuild_jobs": rebuilds}


def _shares(since: Any) -> dict[str, float]:
    rows = list(RoutingEvent.objects.filter(created_at__gte=since).exclude(expert="").values("expert").annotate(n=Count("id")))
    total = sum(r["n"] for r in rows)
    return {r["expert"]: r["n"] / total for r in rows} if total else {}


def _heldout_accuracy(active: RouterVersion) -> dict[str, Any]:
    """The active router's accuracy on reviewed questions held out from training (split 'test')."""
    from labeling.services import load_embeddings

    from ..ml.textrouter import TextRouter

    held = [e for e in _labelled(held_out=True) if e.expert in active.experts]
    if not held:
        return {"router_accuracy": None, "router_accuracy_note": "no held-out (split 'test') reviewed questions"}
    x = load_embeddings([e.query_id for e in held], embedding_space())
    chosen = TextRouter.load(active.path, with_fast=False).scores(x, [e.text for e in held])[0].argmax(axis=1)
    accuracy = float(np.mean([active.experts[c] == e.expert for c, e in zip(chosen, held, strict=True)]))
    return {"router_accuracy": accuracy, "router_heldout": len(held)}


def nightly_evaluation(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Store one evaluation snapshot: held-out router accuracy, online rates and traffic shares of the last day."""
    since = timezone.now() - timedelta(days=1)
    active = RouterVersion.objects.filter(is_active=True).first()
    metrics: dict[str, Any] = {"router_version": active.version if active else None}
    if active is not None:
        try:
            metrics.update(_heldout_accuracy(active))
        except (OSError, ValueError) as exc:
            metrics["router_accuracy_note"] = f"could not score the active router: {exc}"
        metrics["router_val_accuracy"] = (active.metrics or {}).get("val", {}).get("accuracy")
    events = RoutingEvent.objects.filter(created_at__gte=since)
    agg = events.aggregate(n=Count("id"), fallback=Count("id", filter=Q(fallback_used=True)), abstain=Count("id", filter=Q(abstained=True)))
    ratings = Feedback.objects.filter(created_at__gte=since).aggregate(rated=Count("id"), up=Count("id", filter=Q(rating__gt=0)))
    metrics.update(
        requests=agg["n"], fallback_rate=agg["fallback"] / agg["n"] if agg["n"] else None, abstain_rate=agg["abstain"] / agg["n"] if agg["n"] else None,
        rated=ratings["rated"], thumbs_up_rate=ratings["up"] / ratings["rated"] if ratings["rated"] else None, shares=_shares(since),
        # No relevance judgments are stored in the database yet; retrieval nDCG/recall come from `manage.py evaluate retrieval`.
        retrieval="no stored relevance judgments",
    )
    snapshot = EvaluationSnapshot.objects.create(router_version=metrics["router_version"], metrics=metrics)
    return {"snapshot": snapshot.pk, **{k: v for k, v in metrics.items() if k != "shares"}}


def _recent_questions(since: Any, limit: int) -> list[tuple[str, set[str]]]:
    """Recent question texts, each with the experts it belongs to (``routing.selectors.event_experts``: who may read it)."""
    from ..selectors import event_experts

    events = RoutingEvent.objects.filter(created_at__gte=since).exclude(question="").order_by("-id")[:limit]
    return [(event.question, event_experts(event)) for event in events]


def _readers_of(owners: list[set[str]], nearest: str | None, team_of: dict[str, int | None]) -> list[str]:
    """Whom an alarm quoting questions with these ``owners`` may name: ``[nearest]`` when every question belongs to
    ``nearest``'s team (its team sees all of them), else nobody (a group mixing teams, or holding a question no
    expert owns, is for staff only: naming any expert would show one team's questions to another)."""
    if nearest is None or any(not slugs for slugs in owners):
        return []
    teams = {team_of.get(slug, -1) for slugs in owners for slug in slugs}
    return [nearest] if teams == {team_of.get(nearest, -1)} else []


def _reference_embeddings(limit: int) -> np.ndarray:
    from labeling.services import load_embeddings

    examples = _labelled(held_out=False)
    if len(examples) > limit:
        idx = np.random.default_rng(0).choice(len(examples), limit, replace=False)
        examples = [examples[i] for i in sorted(idx)]
    return load_embeddings([e.query_id for e in examples], embedding_space()) if examples else np.zeros((0, 1))


def _training_abstain_rate(metrics: dict[str, Any]) -> float | None:
    """The in-domain abstention rate the threshold was calibrated for: 1 - its target recall."""
    for where in (metrics, *[v for v in metrics.values() if isinstance(v, dict)]):
        if isinstance(where.get("abstain_target_recall"), (int, float)):
            return 1.0 - float(where["abstain_target_recall"])
    return None


def drift_check(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Compare a week of recent questions (re-encoded) with the router's training questions; alarm on drift."""
    from encoders import get_encoder

    if not settings.STORE_QUESTION_TEXT:
        raise JobFailed("drift needs the recent question text: STORE_QUESTION_TEXT is off")
    active = RouterVersion.objects.filter(is_active=True).first()
    since = timezone.now() - timedelta(days=int(job.params.get("window_days", 7)))
    questions = [question for question, _ in _recent_questions(since, int(job.params.get("sample", settings.DRIFT_SAMPLE)))]
    reference = _reference_embeddings(int(job.params.get("sample", settings.DRIFT_SAMPLE)))
    if len(questions) < 10 or len(reference) < 10:
        reason = f"not enough data ({len(questions)} recent questions, {len(reference)} training questions; need 10 each)"
        DriftReport.objects.create(router_version=active.version if active else None, n_recent=len(questions), n_reference=len(reference), reason=reason)
        return {"drifted": False, "reason": reason}
    recent = np.asarray(get_encoder().encode(questions), dtype=np.float32)
    recent /= np.maximum(np.linalg.norm(recent, axis=1, keepdims=True), 1e-12)
    events = RoutingEvent.objects.filter(created_at__gte=since).aggregate(n=Count("id"), abstained=Count("id", filter=Q(abstained=True)))
    train_rate = _training_abstain_rate(active.metrics or {}) if active else None
    result = drift_ml.detect(recent, np.asarray(reference, dtype=np.float32), abstained=events["abstained"], requests=events["n"], train_abstain_rate=train_rate)
    report = DriftReport.objects.create(
        router_version=active.version if active else None, n_recent=result.n_recent, n_reference=result.n_reference,
        metrics=asdict(result), drifted=result.drifted, reason="; ".join(result.reasons) or "no significant drift",
    )
    if result.drifted:
        alarm_services.raise_alarm(
            AlarmKind.DRIFT, "drift:router", f"router v{active.version}" if active else "router", "Recent questions drifted from the router's training data: " + "; ".join(result.reasons),
            "Review recent low-confidence and abstained questions, label them, and retrain the router (Training); re-cluster if a new topic appears.",
            {"report": report.pk, **asdict(result)},
        )
    return {"report": report.pk, "drifted": result.drifted, "mean_shift": result.mean_shift, "c2st_auc": result.c2st_auc}


def load_check(job: Job, reporter: JobReporter) -> dict[str, Any]:
    alarms = alarm_services.check_load(window_days=int(job.params.get("window_days", settings.LOAD_ALARM_WINDOW_DAYS)))
    return {"alarms": [a.subject for a in alarms]}


def srm_check(job: Job, reporter: JobReporter) -> dict[str, Any]:
    alarms = [experiment_services.check_srm(e) for e in Experiment.objects.filter(status=ExperimentStatus.RUNNING)]
    return {"alarms": [a.subject for a in alarms if a is not None]}


def event_retention(job: Job, reporter: JobReporter) -> dict[str, Any]:
    """Delete routing events past the retention (and expired conversations)."""
    deleted = purge_old_events()
    expired = purge_expired_conversations()
    return {"events_deleted": deleted, "conversations_deleted": expired}
