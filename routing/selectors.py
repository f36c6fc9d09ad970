"""Reads for the console: experts with their knowledge and traffic, the active router, recent jobs, the traffic heatmap, training runs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from experts.models import Expert
from experts.selectors import active_experts
from jobs.models import Job
from jobs.selectors import recent_jobs
from knowledge.selectors import document_counts

from .models import RouterVersion, RoutingEvent, TrainingRun


@dataclass(frozen=True)
class ExpertRow:
    """One line of the overview's expert table."""

    name: str
    slug: str
    status: str
    status_label: str
    documents: int
    chunks: int
    requests_24h: int
    requests_total: int


def traffic_by_expert(since: datetime | None = None) -> dict[str, int]:
    """Number of routed requests per answering expert's slug, optionally only those after ``since``."""
    events = RoutingEvent.objects.all()
    if since is not None:
        events = events.filter(created_at__gte=since)
    rows = events.order_by().values("expert").annotate(n=Count("id"))
    return {r["expert"]: r["n"] for r in rows}


def expert_rows() -> list[ExpertRow]:
    """Every expert with its document and chunk counts and its traffic (last 24 h and all time)."""
    counts = document_counts()
    recent = traffic_by_expert(since=timezone.now() - timedelta(hours=24))
    total = traffic_by_expert()
    return [
        ExpertRow(
            name=e.name, slug=e.slug, status=e.status, status_label=e.get_status_display(),
            documents=counts.get(e.pk, {}).get("documents", 0), chunks=counts.get(e.pk, {}).get("chunks", 0),
            requests_24h=recent.get(e.slug, 0), requests_total=total.get(e.slug, 0),
        )
        for e in Expert.objects.order_by("name", "slug")
    ]


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


def latest_jobs(limit: int = 5) -> list[Job]:
    """The newest jobs, for the overview."""
    return list(recent_jobs(limit))


def playground_modes() -> list[tuple[str, str]]:
    """Choices for the playground's mode select: the router's modes, then each active expert."""
    modes = [("auto", "auto — top 2 experts"), ("auto:fast", "auto:fast — top expert only")]
    modes += [(slug, f"{slug} — {name} (bypass router)") for slug, name in active_experts().order_by("slug").values_list("slug", "name")]
    return modes


# --- traffic heatmap -----------------------------------------------------------------------------

# window key → (label, number of buckets, bucket size); the buckets end with the current one.
HEATMAP_WINDOWS: dict[str, tuple[str, int, str]] = {
    "24h": ("Last 24 hours, by hour", 24, "hour"),
    "7d": ("Last 7 days, by day", 7, "day"),
    "30d": ("Last 30 days, by day", 30, "day"),
}
DEFAULT_HEATMAP_WINDOW = "24h"


@dataclass(frozen=True)
class HeatCell:
    """One expert-by-time-bucket cell: its request count and its intensity (count / busiest cell, 0 to 1)."""

    count: int
    intensity: float


@dataclass(frozen=True)
class HeatRow:
    """One expert's line of the heatmap and its share of the window's traffic."""

    slug: str
    name: str
    active: bool
    cells: list[HeatCell]
    total: int
    share: float
    over_threshold: bool

    @property
    def share_percent(self) -> float:
        return 100 * self.share


@dataclass(frozen=True)
class Heatmap:
    """Expert-by-time-bucket request counts for one window, with the load balance across experts."""

    window: str
    label: str
    unit: str
    buckets: list[datetime]
    rows: list[HeatRow]
    total: int
    abstained: int
    fair_share: float
    load_cv: float
    threshold: float

    @property
    def fair_share_percent(self) -> float:
        return 100 * self.fair_share

    @property
    def threshold_percent(self) -> float:
        return 100 * self.threshold


def heatmap_buckets(window: str, now: datetime) -> list[datetime]:
    """The starts of the window's buckets, oldest first, ending with the bucket that holds ``now``."""
    _, n, unit = HEATMAP_WINDOWS[window]
    local = timezone.localtime(now)
    if unit == "hour":
        # Step in UTC so a daylight-saving change never repeats or skips an hour.
        end = local.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        return [timezone.localtime(end - timedelta(hours=i)) for i in reversed(range(n))]
    end = local.replace(hour=0, minute=0, second=0, microsecond=0)
    return [end - timedelta(days=i) for i in reversed(range(n))]


def load_cv(shares: list[float]) -> float:
    """Coefficient of variation (population std / mean) of traffic shares; 0 is perfectly even."""
    if not shares:
        return 0.0
    mean = sum(shares) / len(shares)
    if mean <= 0:
        return 0.0
    return (sum((s - mean) ** 2 for s in shares) / len(shares)) ** 0.5 / mean


def traffic_heatmap(window: str = DEFAULT_HEATMAP_WINDOW, now: datetime | None = None, threshold: float = 0.45) -> Heatmap:
    """Routed requests per answering expert and time bucket over ``window`` (a key of ``HEATMAP_WINDOWS``).

    Rows are the active experts plus any other expert that answered in the window. Shares are of the
    requests some expert answered (abstentions are counted apart); the fair share is 1/N of the active
    experts and the load CV is taken over their shares.
    """
    if window not in HEATMAP_WINDOWS:
        window = DEFAULT_HEATMAP_WINDOW
    label, _, unit = HEATMAP_WINDOWS[window]
    buckets = heatmap_buckets(window, now or timezone.now())
    trunc = TruncHour("created_at") if unit == "hour" else TruncDay("created_at")
    events = RoutingEvent.objects.filter(created_at__gte=buckets[0]).order_by()
    counts: dict[tuple[str, datetime], int] = {}
    for row in events.annotate(bucket=trunc).values("expert", "bucket").annotate(n=Count("id")):
        key = (row["expert"], row["bucket"])
        counts[key] = counts.get(key, 0) + row["n"]
    abstained = sum(n for (slug, _), n in counts.items() if not slug)
    counts = {key: n for key, n in counts.items() if key[0]}

    active = set(active_experts().values_list("slug", flat=True))
    seen = {slug for slug, _ in counts}
    names = dict(Expert.objects.filter(slug__in=active | seen).values_list("slug", "name"))
    slugs = sorted(active | seen, key=lambda s: (names.get(s, s).lower(), s))
    total = sum(counts.values())
    busiest = max(counts.values(), default=0)
    fair = 1 / len(active) if active else (1 / len(slugs) if slugs else 0.0)
    rows = []
    for slug in slugs:
        cells = [HeatCell(n, n / busiest if busiest else 0.0) for n in (counts.get((slug, b), 0) for b in buckets)]
        expert_total = sum(c.count for c in cells)
        share = expert_total / total if total else 0.0
        rows.append(HeatRow(slug, names.get(slug, slug), slug in active, cells, expert_total, share, share > threshold))
    return Heatmap(
        window=window, label=label, unit=unit, buckets=buckets, rows=rows, total=total, abstained=abstained,
        fair_share=fair, load_cv=load_cv([r.share for r in rows if r.active] if active else [r.share for r in rows]),
        threshold=threshold,
    )


# --- training runs -------------------------------------------------------------------------------

def _number(value: Any) -> float | None:
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
    hidden, epochs, epochs_run = _number(params.get("hidden_dim")), _number(params.get("epochs")), _number(metrics.get("epochs_run"))
    accuracy = _number(val.get("accuracy"))
    macro_f1 = _number(val.get("macro_f1"))
    version = run.router_version
    return TrainingRunRow(
        run=run, version=version, is_active=bool(version and version.is_active),
        balance_weight=_number(params.get("balance_weight")), label_noise=_number(params.get("label_noise")),
        noise_kind=str(params.get("noise_kind") or ""), hidden_dim=None if hidden is None else int(hidden),
        epochs=None if epochs is None else int(epochs), epochs_run=None if epochs_run is None else int(epochs_run),
        val_accuracy=accuracy if accuracy is not None else _number(diagnostics.get("accuracy")),
        val_macro_f1=macro_f1 if macro_f1 is not None else _number(diagnostics.get("macro_f1")),
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
        epoch = _number(entry.get("epoch"))
        rows.append({
            "epoch": int(epoch) if epoch is not None else i,
            "train_loss": _number(entry.get("train_loss")),
            "val_loss": _number(entry.get("val_loss")),
            "val_accuracy": _number(entry.get("val_accuracy")),
        })
    return rows


def expert_names(slugs: list[str]) -> dict[str, str]:
    """Expert display names by slug (slugs without an expert row are absent)."""
    return dict(Expert.objects.filter(slug__in=slugs).values_list("slug", "name"))
