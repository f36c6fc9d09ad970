"""Experiments: create, start, pause, stop, read, promote, roll back, and the SRM check of a running one.

The statistics live in ``routing.experiments.stats``; this module turns routing events and feedback into
the counts it needs, enforces the rules (two distinct versions, one open experiment per target, a
split inside (0, 1), no promotion without enough data) and performs the switch on promotion.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import Count, Q
from django.utils import timezone

from encoders import embedding_space
from experts.choices import VersionStatus
from experts.models import Expert, ExpertVersion
from jobs.services import JobFailed

from ..alarms.choices import AlarmKind
from ..alarms.models import Alarm
from ..alarms.services import raise_alarm
from ..models import Feedback, RouterVersion, RoutingEvent
from . import stats as abtest
from .assignment import clear_cache as clear_serving_cache
from .choices import OPEN_STATUSES, ExperimentKind, ExperimentStatus, Metric
from .models import Experiment

ARMS = ("control", "treatment")
LATENCY_SAMPLE = 20000


class ExperimentError(ValueError):
    """A refused action on an experiment; ``param`` names the offending field when there is one."""

    def __init__(self, message: str, param: str | None = None):
        super().__init__(message)
        self.param = param


# --- creating and changing state -----------------------------------------------------------------

def _versions_of(kind: str, expert: Expert | None) -> list[int]:
    if kind == ExperimentKind.ROUTER:
        return list(RouterVersion.objects.order_by("version").values_list("version", flat=True))
    if expert is None:
        raise ExperimentError("an expert experiment needs an expert", "expert")
    return list(ExpertVersion.objects.filter(expert=expert).exclude(status__in=[VersionStatus.FAILED, VersionStatus.TRAINING]).order_by("version").values_list("version", flat=True))


def _active_version(kind: str, expert: Expert | None) -> int | None:
    if kind == ExperimentKind.ROUTER:
        return RouterVersion.objects.filter(is_active=True).values_list("version", flat=True).first()
    return ExpertVersion.objects.filter(expert=expert, status=VersionStatus.ACTIVE).values_list("version", flat=True).first()


# What each generator reads of an expert version; fields outside it cannot change an answer under it.
# The extractive generator assembles cited sentences ("[n]") from the retrieved passages: no
# language model, so it reads nothing of a version (not the adapter, the prompt or the citation
# format; the knowledge snapshot is a record, retrieval reads the expert's live collection).
GENERATOR_READS: dict[str, tuple[str, ...]] = {"extractive": ()}
VERSION_FIELDS = (("adapter_path", "adapter"), ("system_prompt", "prompt"), ("citation_format", "citation format"), ("knowledge_snapshot", "knowledge snapshot"))


def _refuse_what_the_generator_ignores(expert: Expert, control: int, treatment: int) -> None:
    """Refuse an expert experiment whose two versions differ only in what the configured generator never reads.

    Under ``GENERATOR=extractive`` an adapter or prompt experiment would serve the same answers in
    both arms and could only ever find noise.
    """
    from django.conf import settings

    generator = settings.GENERATOR
    reads = GENERATOR_READS.get(generator)
    if reads is None:
        return
    a, b = (ExpertVersion.objects.get(expert=expert, version=v) for v in (control, treatment))
    if any(getattr(a, field) != getattr(b, field) for field in reads):
        return
    differs = [label for field, label in VERSION_FIELDS if getattr(a, field) != getattr(b, field)]
    what = ", ".join(differs) if differs else "nothing the answers depend on"
    raise ExperimentError(
        f"GENERATOR={generator} answers with cited sentences from the retrieved passages and never reads a version's adapter or prompt: "
        f"v{control} and v{treatment} differ in {what} only, so both arms would serve the same answers. "
        "Run adapter and prompt experiments with GENERATOR=transformers or vllm.",
        "treatment_version",
    )


def create_experiment(
    *, kind: str, control_version: int, treatment_version: int, expert: Expert | None = None, name: str = "",
    split: float = 0.5, unit: str = "conversation", primary_metric: str = Metric.THUMBS_UP, design: str = "sequential",
    min_effect: float = 0.05, baseline: float = 0.6, alpha: float = 0.05, power: float = 0.8, user: Any = None,
) -> Experiment:
    """Validate and create a draft experiment with its power calculation (shown before start).

    Raises:
        ExperimentError: one version only, the same version twice, an unknown version, a split of
            0 or 1, an open experiment on the same target, or a design the statistics refuse.
    """
    if kind not in ExperimentKind.values:
        raise ExperimentError(f"kind must be one of {', '.join(ExperimentKind.values)}", "kind")
    if kind == ExperimentKind.ROUTER:
        expert = None
    versions = _versions_of(kind, expert)
    what = "the router" if kind == ExperimentKind.ROUTER else f"expert {expert.slug}"  # type: ignore[union-attr]
    if len(versions) < 2:
        raise ExperimentError(f"{what} has {len(versions)} version(s); an experiment needs two to compare", "treatment_version")
    for param, v in (("control_version", control_version), ("treatment_version", treatment_version)):
        if v not in versions:
            raise ExperimentError(f"{what} has no version {v} (versions: {', '.join(map(str, versions))})", param)
    if control_version == treatment_version:
        raise ExperimentError("control and treatment must be different versions", "treatment_version")
    if kind == ExperimentKind.EXPERT:
        _refuse_what_the_generator_ignores(expert, control_version, treatment_version)  # type: ignore[arg-type]
    if not 0 < split < 1:
        raise ExperimentError(f"the split must send traffic to both arms (treatment share strictly between 0 and 1); got {split:g}", "split")
    if primary_metric not in Metric.values:
        raise ExperimentError(f"primary metric must be one of {', '.join(Metric.values)}", "primary_metric")
    config = abtest.Config(baseline=baseline, min_effect=min_effect, alpha=alpha, power=power, split=split, design=design)  # type: ignore[arg-type]
    try:
        the_plan = abtest.plan(config)
    except abtest.AbTestError as exc:
        raise ExperimentError(str(exc), "min_effect") from exc
    target = "router" if kind == ExperimentKind.ROUTER else f"expert:{expert.slug}"  # type: ignore[union-attr]
    clash = Experiment.objects.filter(target=target, status__in=OPEN_STATUSES).first()
    if clash is not None:
        raise ExperimentError(f"{what} already has an open experiment ({clash.name}, {clash.status}); stop it first", "expert")
    try:
        with transaction.atomic():
            return Experiment.objects.create(
                name=name or f"{what}: v{control_version} vs v{treatment_version}", kind=kind, expert=expert, target=target,
                control_version=control_version, treatment_version=treatment_version, split=split, unit=unit, salt=secrets.token_hex(8),
                primary_metric=primary_metric, design=design, min_effect=min_effect, baseline=baseline, alpha=alpha, power=power,
                plan={**asdict(the_plan), "n_total": the_plan.n_total}, created_by=user if getattr(user, "pk", None) else None,
            )
    except IntegrityError as exc:  # a concurrent create on the same target
        raise ExperimentError(f"{what} already has an open experiment", "expert") from exc


def _transition(experiment: Experiment, allowed: tuple[str, ...], to: str, verb: str) -> Experiment:
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if exp.status not in allowed:
            raise ExperimentError(f"cannot {verb} an experiment that is {exp.get_status_display().lower()}", "status")
        exp.status = to
        fields = ["status"]
        if to == ExperimentStatus.RUNNING and exp.started_at is None:
            exp.started_at = timezone.now()
            fields.append("started_at")
        if to == ExperimentStatus.STOPPED:
            exp.ended_at = timezone.now()
            fields.append("ended_at")
        exp.save(update_fields=fields)
    clear_serving_cache()
    return exp


def delete_draft(experiment: Experiment) -> None:
    """Delete an experiment that never started (nothing was assigned to it); any other is kept for its record."""
    with transaction.atomic():
        locked = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if locked.status != ExperimentStatus.DRAFT:
            raise ExperimentError(f"only a draft can be deleted; this one is {locked.get_status_display().lower()}: stop it instead")
        locked.delete()


def start(experiment: Experiment) -> Experiment:
    """Start (or resume) the experiment: requests are assigned to its arms from now on."""
    return _transition(experiment, (ExperimentStatus.DRAFT, ExperimentStatus.PAUSED), ExperimentStatus.RUNNING, "start")


def pause(experiment: Experiment) -> Experiment:
    """Pause: everyone is served by the current active version; assignments resume unchanged on start."""
    return _transition(experiment, (ExperimentStatus.RUNNING,), ExperimentStatus.PAUSED, "pause")


def stop(experiment: Experiment) -> Experiment:
    """Stop for good without promoting; the target is free for a new experiment."""
    return _transition(experiment, (ExperimentStatus.DRAFT, ExperimentStatus.RUNNING, ExperimentStatus.PAUSED), ExperimentStatus.STOPPED, "stop")


def _switch_to(experiment: Experiment, version: int) -> None:
    """Make ``version`` the one everybody gets (router or expert), atomically."""
    if experiment.kind == ExperimentKind.ROUTER:
        from .. import services as routing_services

        routing_services.activate_version(RouterVersion.objects.get(version=version))
        return
    # The experts app's own activation: it checks the adapter, loads it into vLLM first when that
    # serves, and saves through the ORM so the serving caches hear of the switch.
    from experts.services import VersionError, activate_version

    try:
        activate_version(ExpertVersion.objects.get(expert=experiment.expert, version=version))
    except VersionError as exc:
        raise ExperimentError(str(exc), "arm") from None


def promote(experiment: Experiment, *, force_arm: str | None = None) -> Experiment:
    """Promote the treatment when the decision rule says so (``routing.experiments.stats.decide``).

    ``force_arm="control"`` ends the experiment keeping the control (always allowed). Promoting the
    treatment with too little data, no significance, a guardrail regression or an SRM is refused.
    """
    if experiment.status not in (ExperimentStatus.RUNNING, ExperimentStatus.PAUSED, ExperimentStatus.STOPPED):
        raise ExperimentError(f"cannot promote an experiment that is {experiment.get_status_display().lower()}", "status")
    arm = force_arm or "treatment"
    if arm not in ARMS:
        raise ExperimentError("arm must be 'control' or 'treatment'", "arm")
    report = read(experiment)
    if arm == "treatment" and not report["decision"]["can_promote"]:
        raise ExperimentError(f"cannot promote the treatment: {report['decision']['reason']}", "arm")
    version = experiment.treatment_version if arm == "treatment" else experiment.control_version
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().get(pk=experiment.pk)
        exp.previous_version = _active_version(exp.kind, exp.expert)
        _switch_to(exp, version)
        exp.status, exp.winner, exp.ended_at, exp.decision = ExperimentStatus.PROMOTED, arm, timezone.now(), report["decision"]
        exp.save(update_fields=["status", "winner", "ended_at", "decision", "previous_version"])
    clear_serving_cache()
    return exp


def rollback(experiment: Experiment) -> Experiment:
    """Undo a promotion: the version that served before it serves again."""
    if experiment.status != ExperimentStatus.PROMOTED:
        raise ExperimentError("only a promoted experiment can be rolled back", "status")
    if experiment.previous_version is None:
        raise ExperimentError("nothing served before the promotion; there is nothing to roll back to", "status")
    with transaction.atomic():
        exp = Experiment.objects.select_for_update().get(pk=experiment.pk)
        _switch_to(exp, exp.previous_version)  # type: ignore[arg-type]
        exp.status = ExperimentStatus.ROLLED_BACK
        exp.save(update_fields=["status"])
    clear_serving_cache()
    return exp


# --- reading the metrics ---------------------------------------------------------------------------

def config_of(experiment: Experiment) -> abtest.Config:
    return abtest.Config(
        baseline=experiment.baseline, min_effect=experiment.min_effect, alpha=experiment.alpha, power=experiment.power,
        split=experiment.split, design=experiment.design,  # type: ignore[arg-type]
    )


def arm_counts(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Per arm: units (distinct conversations/users, else requests), requests, fallbacks, abstentions, ratings, latencies."""
    events = RoutingEvent.objects.filter(experiment_id=experiment.pk, arm__in=ARMS)
    if experiment.kind == ExperimentKind.EXPERT and experiment.expert_id:
        # Every request of an assigned subject carries the arm, but only the expert's own answers
        # can differ between its versions; routing happens before the version matters, so this
        # filter treats both arms alike and keeps the comparison (and the SRM check) fair.
        events = events.filter(expert=experiment.expert.slug)
    rows = {r["arm"]: r for r in events.values("arm").annotate(
        requests=Count("id"), fallbacks=Count("id", filter=Q(fallback_used=True)), abstains=Count("id", filter=Q(abstained=True)),
        units=Count("conversation_id", distinct=True, filter=~Q(conversation_id="")), no_unit=Count("id", filter=Q(conversation_id="")),
    )}
    out: dict[str, dict[str, Any]] = {}
    for arm in ARMS:
        row = rows.get(arm, {})
        ids = events.filter(arm=arm).values("request_id")
        ratings = Feedback.objects.filter(request_id__in=ids).aggregate(rated=Count("id"), up=Count("id", filter=Q(rating__gt=0)))
        latencies = np.array(list(events.filter(arm=arm).order_by("-id").values_list("total_ms", flat=True)[:LATENCY_SAMPLE]), dtype=float)
        out[arm] = {
            "units": int(row.get("units", 0) + row.get("no_unit", 0)), "requests": int(row.get("requests", 0)),
            "fallbacks": int(row.get("fallbacks", 0)), "abstains": int(row.get("abstains", 0)),
            "rated": int(ratings["rated"]), "thumbs_up": int(ratings["up"]), "latencies": latencies,
        }
    return out


def _rate_metrics(counts: dict[str, dict[str, Any]]) -> dict[str, abtest.RateMetric]:
    a, b = counts["control"], counts["treatment"]
    return {
        Metric.THUMBS_UP: abtest.RateMetric(Metric.THUMBS_UP, abtest.Proportion(a["thumbs_up"], a["rated"]), abtest.Proportion(b["thumbs_up"], b["rated"]), True),
        Metric.FALLBACK: abtest.RateMetric(Metric.FALLBACK, abtest.Proportion(a["fallbacks"], a["requests"]), abtest.Proportion(b["fallbacks"], b["requests"]), False),
        Metric.ABSTAIN: abtest.RateMetric(Metric.ABSTAIN, abtest.Proportion(a["abstains"], a["requests"]), abtest.Proportion(b["abstains"], b["requests"]), False),
    }


def read(experiment: Experiment) -> dict[str, Any]:
    """Every arm's metrics with CIs, the SRM check and the decision (primary + Holm-corrected guardrails)."""
    counts = arm_counts(experiment)
    rates = _rate_metrics(counts)
    primary = rates[Metric(experiment.primary_metric)]
    guardrails: list[abtest.RateMetric | abtest.MeanMetric] = [m for name, m in rates.items() if name != experiment.primary_metric]
    guardrails.append(abtest.MeanMetric("latency_ms", counts["control"]["latencies"], counts["treatment"]["latencies"], higher_is_better=False))
    decision = abtest.decide(primary, config_of(experiment), guardrails=guardrails, n_control=counts["control"]["units"], n_treatment=counts["treatment"]["units"])
    arms = {arm: {k: v for k, v in c.items() if k != "latencies"} for arm, c in counts.items()}
    return {"arms": arms, "decision": asdict(decision), "offline": offline_metrics(experiment)}


OFFLINE_SAMPLE = 2000


def _router_accuracy(version: RouterVersion, x: np.ndarray, texts: list[str], labels: list[str]) -> dict[str, Any]:
    from ..ml.textrouter import TextRouter

    try:
        router = TextRouter.load(version.path, with_fast=False)
    except (OSError, ValueError, KeyError) as exc:
        return {"accuracy": None, "note": f"cannot load router v{version.version}: {exc}"}
    chosen = router.scores(x, texts)[0].argmax(axis=1)
    hits = [version.experts[c] == label for c, label in zip(chosen, labels, strict=True)]
    p = abtest.Proportion(int(sum(hits)), len(hits))
    return {"accuracy": p.rate, "ci": abtest.wilson(p), "n": len(hits)}


def offline_metrics(experiment: Experiment) -> dict[str, Any]:
    """Offline figures per arm: router accuracy on reviewed questions (router experiments), each version's own evaluation (expert experiments).

    Reviewed questions are those a reviewer labelled in the review queue: neither router saw its
    verdict when it served them, so both arms are scored on the same, honest set.
    """
    if experiment.kind == ExperimentKind.EXPERT:
        versions = {v.version: v for v in ExpertVersion.objects.filter(expert=experiment.expert, version__in=[experiment.control_version, experiment.treatment_version])}
        return {arm: {"metrics": getattr(versions.get(n), "metrics", {}) or {}, "knowledge_snapshot": getattr(versions.get(n), "knowledge_snapshot", "")}
                for arm, n in (("control", experiment.control_version), ("treatment", experiment.treatment_version))}

    from labeling.models import ReviewDecision
    from labeling.services import load_embeddings

    reviewed = list(ReviewDecision.objects.filter(expert__isnull=False, query__isnull=False).order_by("-pk").values_list("query_id", "expert__slug", "query__text")[:OFFLINE_SAMPLE])
    if not reviewed:
        return {"note": "no reviewed questions yet (review queue)"}
    try:
        x = load_embeddings([q for q, _, _ in reviewed], embedding_space())
    except JobFailed as exc:  # missing embeddings are reported on the page, not raised
        return {"note": f"reviewed questions not embedded yet: {exc}"}
    labels, texts = [slug for _, slug, _ in reviewed], [text for _, _, text in reviewed]
    versions = {v.version: v for v in RouterVersion.objects.filter(version__in=[experiment.control_version, experiment.treatment_version])}
    return {arm: _router_accuracy(versions[n], x, texts, labels) if n in versions else {"accuracy": None, "note": "version deleted"}
            for arm, n in (("control", experiment.control_version), ("treatment", experiment.treatment_version))}


def check_srm(experiment: Experiment) -> Alarm | None:
    """Raise (or refresh) an SRM alarm when the running experiment's arm sizes break the split."""
    counts = arm_counts(experiment)
    p = abtest.srm_test(counts["control"]["units"], counts["treatment"]["units"], experiment.split)
    if p >= abtest.SRM_ALPHA:
        return None
    return raise_alarm(
        AlarmKind.SRM, f"srm:{experiment.pk}", str(experiment.pk),
        f"Sample ratio mismatch in {experiment.name}: {counts['control']['units']} control vs {counts['treatment']['units']} treatment for a {1 - experiment.split:.0%}/{experiment.split:.0%} split (p = {p:.2g})",
        "Pause the experiment and check the assignment (caching, bots, a failing arm dropping events); its metrics cannot be trusted.",
        {"p_value": p, "control": counts["control"]["units"], "treatment": counts["treatment"]["units"]},
        experts=experiment_experts(experiment),
    )


def experiment_experts(experiment: Experiment) -> list[str]:
    """The experts an experiment concerns: its expert, or for a router experiment the experts of both arms' router versions."""
    if experiment.kind == ExperimentKind.EXPERT:
        return [experiment.expert.slug] if experiment.expert_id else []
    slugs: set[str] = set()
    for experts in RouterVersion.objects.filter(version__in=[experiment.control_version, experiment.treatment_version]).values_list("experts", flat=True):
        slugs.update(s for s in (experts if isinstance(experts, list) else []) if isinstance(s, str))
    return sorted(slugs)


def create_for(user: Any, data: dict[str, Any]) -> Experiment:
    """Create the draft ``forms.experiment_form`` validated for ``user``.

    Raises:
        Http404: an expert ``user`` may not change. PermissionDenied: a router experiment by a non-staff user.
        ExperimentError: what ``create_experiment`` refuses.
    """
    from django.core.exceptions import PermissionDenied

    from experts.access import get_expert_or_404

    expert = None
    if data["kind"] == ExperimentKind.EXPERT:
        expert = get_expert_or_404(user, data["expert"], edit=True)  # offered only if editable: a forged slug is a 404
    elif not user.is_staff:
        raise PermissionDenied("Only staff users may run router experiments.")
    fields = ("name", "control_version", "treatment_version", "split", "unit", "primary_metric", "design", "baseline", "min_effect", "alpha", "power")
    return create_experiment(kind=data["kind"], expert=expert, user=user, **{key: data[key] for key in fields})


# What a person may do to an experiment, by the name the console's buttons and the API's URLs use.
ACTIONS = {"start": start, "pause": pause, "stop": stop, "rollback": rollback, "promote": promote,
           "keep_control": lambda e: promote(e, force_arm="control"), "delete": delete_draft}
