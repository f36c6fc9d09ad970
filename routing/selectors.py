"""Reads of routing records: traffic per expert, the active router, training runs and their history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count

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
    return TrainingRunRow(
        run=run, version=version, is_active=bool(version and version.is_active),
        balance_weight=as_number(params.get("balance_weight")), label_noise=as_number(params.get("label_noise")),
        noise_kind=str(params.get("noise_kind") or ""), hidden_dim=None if hidden is None else int(hidden),
        epochs=None if epochs is None else int(epochs), epochs_run=None if epochs_run is None else int(epochs_run),
        val_accuracy=accuracy if accuracy is not None else as_number(diagnostics.get("accuracy")),
        val_macro_f1=macro_f1 if macro_f1 is not None else as_number(diagnostics.get("macro_f1")),
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
