"""Reads of routing records: traffic per expert, who may see which routing event, the active router, training
runs and their history."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Q, QuerySet, TextField
from django.db.models.functions import Cast

from experts.access import visible_slugs

from .models import RouterVersion, RoutingEvent, TrainingRun


def traffic_by_expert(since: datetime | None = None) -> dict[str, int]:
    """Number of routed requests per answering expert's slug, optionally only those after ``since``.

    The ASGI warm-up loads the busiest experts' adapters first with it (``switchboard.asgi``).
    """
    events = RoutingEvent.objects.all()
    if since is not None:
        events = events.filter(created_at__gte=since)
    rows = events.order_by().values("expert").annotate(n=Count("id"))
    return {r["expert"]: r["n"] for r in rows}


# --- who may see which event ----------------------------------------------------------------------

def _slugs_of(entries: Any) -> set[str]:
    """The ``slug`` of each ``{slug, ...}`` entry of a recorded list (the ranking, the failover list)."""
    if not isinstance(entries, list):
        return set()
    return {e["slug"] for e in entries if isinstance(e, dict) and isinstance(e.get("slug"), str) and e["slug"]}


def event_experts(event: RoutingEvent) -> set[str]:
    """The experts ``event`` belongs to: the one that answered it; for a question no expert answered, its candidates.

    A question no expert answered (``expert == ""``: the router abstained, every expert failed, the
    request was refused) belongs to the experts it could have gone to: the router's ranked candidates
    (``experts``), the experts it failed over from (``failover_from``) and the fallback expert its
    trace names. Not every live expert's score in the trace (``trace["scores"]``): that would make
    every question everyone's. A question with none of these belongs to no expert (staff only).
    """
    if event.expert:
        return {event.expert}
    slugs = _slugs_of(event.experts) | _slugs_of(event.failover_from)
    evidence = event.trace.get("evidence") if isinstance(event.trace, dict) else None
    fallback = evidence.get("fallback") if isinstance(evidence, dict) else None
    if isinstance(fallback, str) and fallback:
        slugs.add(fallback)
    return slugs


def event_is_visible(event: RoutingEvent, slugs: set[str] | None) -> bool:
    """Whether an event is shown to a user who may see the experts ``slugs`` (``None``: staff, every event).

    The rule of ``visible_events``, for an event already read: one of the experts it belongs to
    (``event_experts``) is in ``slugs``.
    """
    return slugs is None or bool(event_experts(event) & slugs)


def _names_a_candidate(slugs: set[str]) -> Q:
    """Unanswered events whose recorded candidates (``event_experts``) include one of ``slugs``, as a database filter.

    The ranking and the failover list are JSON lists of ``{"slug": ..., ...}`` objects of any length:
    they are matched as text (``"slug": "<one of slugs>"``; slugs hold only letters, digits, ``-`` and
    ``_``, so the quotes bound them), which every backend's JSON text and regular expressions support.
    """
    if not slugs:
        return Q(pk__in=[])
    pattern = r'"slug"\s*:\s*"(' + "|".join(re.escape(s) for s in sorted(slugs)) + ')"'
    return Q(expert="") & (Q(ranked_text__regex=pattern) | Q(failover_text__regex=pattern) | Q(trace__evidence__fallback__in=sorted(slugs)))


def event_slugs_for(user: Any) -> set[str] | None:
    """The experts whose events ``user`` sees: ``None`` for staff (every event), else the experts they may see."""
    staff = getattr(user, "is_authenticated", False) and (getattr(user, "is_staff", False) or getattr(user, "is_superuser", False))
    return None if staff else visible_slugs(user)


def visible_events(user: Any, queryset: QuerySet[RoutingEvent] | None = None) -> QuerySet[RoutingEvent]:
    """The routing events ``user`` may see (traces, the review queue): the one access rule of routing events.

    Staff see every event. Anyone else sees an answered event when they may see the expert that
    answered it, and a question no expert answered when they may see at least one of its candidates
    (``event_experts``); a question with no candidate is staff's only. Anonymous callers see none.
    """
    events = RoutingEvent.objects.all() if queryset is None else queryset
    slugs = event_slugs_for(user)
    if slugs is None:
        return events
    if not slugs:
        return events.none()
    return events.alias(ranked_text=Cast("experts", TextField()), failover_text=Cast("failover_from", TextField())).filter(
        Q(expert__in=sorted(slugs)) | _names_a_candidate(slugs)
    )


def active_router() -> RouterVersion | None:
    """The router version that serves requests, if one has been trained."""
    return RouterVersion.objects.filter(is_active=True).first()


def validation_accuracy(version: RouterVersion | None) -> float | None:
    """The validation accuracy recorded when ``version`` was trained (``metrics["val"]["accuracy"]``)."""
    if version is None:
        return None
    val = (version.metrics or {}).get("val") or {}
    accuracy = val.get("accuracy") if isinstance(val, dict) else None
    return float(accuracy) if accuracy is not None else None


# --- training runs -------------------------------------------------------------------------------

def as_number(value: Any) -> float | None:
    try:
        return None if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class TrainingRunRow:
    """One training run as the console lists it (parameters and validation scores read defensively)."""

    run: TrainingRun
    version: RouterVersion | None
    is_active: bool
    balance_weight: float | None
    label_noise: float | None
    noise_kind: str
    hidden_dim: int | None
    epochs: int | None
    epochs_run: int | None
    val_accuracy: float | None
    val_macro_f1: float | None
    verdict: str  # whether the run's router went live, and why, in words ("" for runs from before verdicts were kept)


def activation_verdict(activation: Any) -> str:
    """The retraining verdict (``metrics["activation"]``, see ``services._compare_with_active``) as one sentence with its figures.

    A comparison on held-out questions reads "held-out accuracy 0.933 against the active router's
    (v1) 0.950; McNemar p = 0.625: not activated"; any other decision gives its recorded reason.
    """
    if not isinstance(activation, dict) or not activation:
        return ""
    outcome = "activated" if activation.get("activated") else "not activated"
    candidate, active = as_number(activation.get("candidate_accuracy")), as_number(activation.get("active_accuracy"))
    paired = activation.get("paired") if isinstance(activation.get("paired"), dict) else {}
    p_value = as_number(paired.get("p_value"))
    if candidate is None or active is None:
        reason = str(activation.get("reason") or "").strip()
        return f"{outcome.capitalize()}: {reason}" if reason else outcome.capitalize()
    version = f" (v{activation['active_version']})" if activation.get("active_version") is not None else ""
    held_out = as_number(activation.get("n_heldout"))
    on = f" on {int(held_out)} held-out questions" if held_out else ""
    mcnemar = f"; McNemar p = {p_value:.3g}" if p_value is not None else ""
    return f"Held-out accuracy {candidate:.3f} against the active router's{version} {active:.3f}{on}{mcnemar}: {outcome}."


def training_run_row(run: TrainingRun) -> TrainingRunRow:
    """The list/detail summary of ``run``: params may be partial and metrics absent on older runs."""
    params = run.params if isinstance(run.params, dict) else {}
    metrics = run.metrics if isinstance(run.metrics, dict) else {}
    val = metrics.get("val") if isinstance(metrics.get("val"), dict) else {}
    diagnostics = metrics.get("diagnostics") if isinstance(metrics.get("diagnostics"), dict) else {}
    hidden, epochs, epochs_run = as_number(params.get("hidden_dim")), as_number(params.get("epochs")), as_number(metrics.get("epochs_run"))
    accuracy = as_number(val.get("accuracy"))
    macro_f1 = as_number(val.get("macro_f1"))
    version = run.router_version
    activation = metrics.get("activation") if isinstance(metrics.get("activation"), dict) else {}
    by_hand = bool(version and version.is_active and activation and not activation.get("activated"))
    return TrainingRunRow(
        run=run, version=version, is_active=bool(version and version.is_active),
        balance_weight=as_number(params.get("balance_weight")), label_noise=as_number(params.get("label_noise")),
        noise_kind=str(params.get("noise_kind") or ""), hidden_dim=None if hidden is None else int(hidden),
        epochs=None if epochs is None else int(epochs), epochs_run=None if epochs_run is None else int(epochs_run),
        val_accuracy=accuracy if accuracy is not None else as_number(diagnostics.get("accuracy")),
        val_macro_f1=macro_f1 if macro_f1 is not None else as_number(diagnostics.get("macro_f1")),
        verdict=activation_verdict(activation) + (" It was activated by hand since." if by_hand else ""),
    )


def training_runs(limit: int = 100) -> list[TrainingRunRow]:
    """The newest training runs with their router versions."""
    return [training_run_row(run) for run in TrainingRun.objects.select_related("router_version")[:limit]]


def training_history(run: TrainingRun) -> list[dict[str, float | int | None]]:
    """The run's per-epoch numbers (epoch, train_loss, val_loss, val_accuracy), skipping malformed entries."""
    rows = []
    for i, entry in enumerate(run.history if isinstance(run.history, list) else [], start=1):
        if not isinstance(entry, dict):
            continue
        epoch = as_number(entry.get("epoch"))
        rows.append({
            "epoch": int(epoch) if epoch is not None else i,
            "train_loss": as_number(entry.get("train_loss")),
            "val_loss": as_number(entry.get("val_loss")),
            "val_accuracy": as_number(entry.get("val_accuracy")),
        })
    return rows
