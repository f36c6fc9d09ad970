"""A day of routing traffic to three experts, two router versions and a training run: what the heatmap and
training pages draw (not a test module)."""

from datetime import timedelta

from django.utils import timezone

from routing.models import RouterVersion, RoutingEvent, TrainingRun
from tests.factories import make_expert


def seed_traffic() -> TrainingRun:
    """Three experts with a day of lopsided traffic, two router versions and the run that made the newer one."""
    experts = [("dmv", "Motor Vehicles"), ("ssa", "Social Security"), ("va", "Veterans Affairs")]
    for slug, name in experts:
        make_expert(slug, name, public=False)
    now = timezone.now()
    for hour in range(24):
        for slug, n in [("dmv", 3 + hour % 5), ("ssa", 1 + hour % 3), ("va", hour % 2)]:
            for i in range(n):
                e = RoutingEvent.objects.create(request_id=f"{slug}-{hour}-{i}", mode="auto", expert=slug, experts=[{"slug": slug, "score": 0.9}])
                RoutingEvent.objects.filter(pk=e.pk).update(created_at=now - timedelta(hours=hour))
    RouterVersion.objects.create(version=1, path="/nowhere/v1", experts=["dmv", "ssa", "va"], embedding_model="m", data_fingerprint="f", is_active=True)
    v2 = RouterVersion.objects.create(version=2, path="/nowhere/v2", experts=["dmv", "ssa", "va"], embedding_model="m", data_fingerprint="f")
    history = [
        {"epoch": e, "train_loss": 1.1 * 0.8 ** e + 0.05, "val_loss": 1.15 * 0.82 ** e + 0.12, "val_accuracy": min(0.95, 0.4 + 0.06 * e)}
        for e in range(1, 13)
    ]
    return TrainingRun.objects.create(
        params={"balance_weight": 0.1, "label_noise": 0.1, "noise_kind": "uniform", "hidden_dim": 256, "epochs": 60},
        history=history, n_train=320, n_val=80, router_version=v2,
        metrics={
            "val": {"accuracy": 0.9375, "macro_f1": 0.931}, "epochs_run": 12,
            "diagnostics": {
                "confusion": [[30, 2, 0], [1, 26, 1], [0, 1, 19]], "load_cv": 0.18, "ece": 0.041, "ece_calibrated": 0.019, "temperature": 1.4,
                "per_expert": {
                    "dmv": {"precision": 0.968, "recall": 0.938, "f1": 0.952, "support": 32},
                    "ssa": {"precision": 0.897, "recall": 0.929, "f1": 0.912, "support": 28},
                    "va": {"precision": 0.95, "recall": 0.95, "f1": 0.95, "support": 20},
                },
            },
        },
    )
