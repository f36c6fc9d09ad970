"""The retraining verdict in words on the training pages: why a retrained router went live or not, with its figures."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.models import RouterVersion, TrainingRun
from routing.selectors import activation_verdict

pytestmark = pytest.mark.django_db

# What services._compare_with_active records when a candidate does not beat the active router.
KEPT = {
    "policy": "if_better", "active_version": 1, "n_heldout": 60, "heldout": "a hashed 10% of the labelled queries", "activated": False,
    "candidate_accuracy": 0.9333, "active_accuracy": 0.95, "paired": {"new_only": 1, "active_only": 2, "p_value": 0.625},
    "reason": "new router: held-out accuracy 0.933 against 0.950 for active v1 ...; kept as a candidate (it does not beat the active router)",
}


def run_with(activation: dict, version: int = 2, active: bool = False) -> TrainingRun:
    router = RouterVersion.objects.create(version=version, path=f"/nowhere/v{version}", experts=["dmv", "ssa"], embedding_model="m",
                                          data_fingerprint="f", metrics={"activation": activation}, is_active=active)
    return TrainingRun.objects.create(params={}, history=[], metrics={"val": {"accuracy": 0.945}, "activation": activation},
                                      n_train=100, n_val=20, router_version=router)


def test_a_router_kept_as_a_candidate_says_why_with_the_held_out_figures_and_the_p_value():
    assert activation_verdict(KEPT) == (
        "Held-out accuracy 0.933 against the active router's (v1) 0.950 on 60 held-out questions; McNemar p = 0.625: not activated."
    )


def test_a_decision_without_a_comparison_gives_its_recorded_reason():
    assert activation_verdict({"policy": "always", "activated": True, "reason": "no active router"}) == "Activated: no active router"
    assert activation_verdict({}) == ""
    assert activation_verdict(None) == ""


def test_the_training_list_and_the_run_page_show_the_verdict(client, owner):
    kept = run_with(KEPT)
    client.force_login(owner)

    listed = client.get(reverse("console-training")).content.decode()
    page = client.get(reverse("console-training-run", args=[kept.pk])).content.decode()

    row = listed.split(f'<tr data-run="{kept.pk}">')[1].split("</tr>")[0]
    assert "against the active router&#x27;s (v1) 0.950 on 60 held-out questions; McNemar p = 0.625: not activated." in row
    verdict = page.split('id="activation-verdict"')[1].split("</p>")[0]
    assert "Held-out accuracy 0.933 against the active router&#x27;s (v1) 0.950" in verdict


def test_a_candidate_activated_by_hand_later_says_so(client, owner):
    kept = run_with(KEPT, active=True)
    client.force_login(owner)

    page = client.get(reverse("console-training-run", args=[kept.pk])).content.decode()

    assert "not activated. It was activated by hand since." in page
