"""The heatmap and a training run page in a real browser; screenshots land in /tmp/heatmap.png and /tmp/training.png.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from experts.models import Expert
from routing.models import RouterVersion, RoutingEvent, TrainingRun

from .navigation import open_nav

PASSWORD = "correct horse battery staple"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def seed() -> TrainingRun:
    """Three experts with a day of lopsided traffic, two router versions and the run that made the newer one."""
    experts = [("dmv", "Motor Vehicles"), ("ssa", "Social Security"), ("va", "Veterans Affairs")]
    for slug, name in experts:
        Expert.objects.create(slug=slug, name=name)
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




def test_a_staff_user_reads_the_heatmap_and_activates_a_training_run(live_server, django_user_model, browser_page):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    run = seed()
    page = browser_page

    page.goto(f"{live_server.url}/heatmap/")
    page.fill("#id_username", "admin")
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Log in')")

    expect(page.locator("h1")).to_have_text("Traffic heatmap")
    expect(page.locator("#heatmap tbody tr")).to_have_count(3)
    expect(page.locator("#shares tr[data-expert='dmv']")).to_contain_text("over threshold")
    expect(page.locator("#shares tr[data-expert='ssa']")).not_to_contain_text("over threshold")
    expect(page.locator("#share-chart")).to_have_attribute("data-ready", "true")
    expect(page.locator("#share-chart canvas")).to_be_visible()
    page.screenshot(path="/tmp/heatmap.png", full_page=True)

    open_nav(page, "experts", "Training")
    expect(page.locator("#training-runs")).to_contain_text("v2")
    page.click(f"a:has-text('#{run.pk}')")
    expect(page.locator("h1")).to_have_text(f"Training run #{run.pk}")
    expect(page.locator("#loss-chart")).to_have_attribute("data-ready", "true")
    assert page.evaluate("document.querySelector('#loss-chart').chart.data.datasets.length") == 2
    expect(page.locator("#confusion")).to_contain_text("Veterans Affairs")
    page.screenshot(path="/tmp/training.png", full_page=True)

    page.check("#id_confirm")
    page.click("button:has-text('Activate this version')")
    expect(page.locator("#active-marker")).to_have_text("active")
    assert RouterVersion.objects.get(is_active=True).version == 2
