"""The console pages of experiments: rendering, refusals with reasons, access rules."""

from __future__ import annotations

import pytest
from django.urls import reverse

from routing.experiments import services
from routing.experiments.models import Experiment

from ..conftest import PASSWORD

pytestmark = pytest.mark.django_db


FORM = {"kind": "expert", "expert": "dmv", "control_version": 1, "treatment_version": 2, "split": 0.5, "unit": "conversation",
        "primary_metric": "thumbs_up_rate", "design": "sequential", "baseline": 0.6, "min_effect": 0.05, "alpha": 0.05, "power": 0.8}


def test_creating_an_experiment_shows_the_power_calculation(admin_client, expert):
    response = admin_client.post(reverse("console-experiments"), FORM)
    exp = Experiment.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("console-experiment", args=[exp.pk])
    page = admin_client.get(response["Location"]).content.decode()
    assert "7996 control and 7996 treatment" in page  # the sequential test's own plan
    assert "Start" in page


def test_a_0_100_split_is_a_field_error(admin_client, expert):
    response = admin_client.post(reverse("console-experiments"), {**FORM, "split": 1})
    assert response.status_code == 400
    assert "strictly between 0 and 1" in response.content.decode()
    assert not Experiment.objects.exists()


def test_an_expert_with_one_version_is_refused_in_the_form(admin_client, lonely_expert):
    response = admin_client.post(reverse("console-experiments"), {**FORM, "expert": "ssa", "treatment_version": 1})
    assert response.status_code == 400
    assert "needs two to compare" in response.content.decode()


def test_promoting_with_too_little_data_is_refused_with_the_reason(admin_client, expert):
    exp = services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2, design="fixed"))
    response = admin_client.post(reverse("console-experiment-action", args=[exp.pk, "promote"]))
    assert response.status_code == 400
    assert "too little data" in response.content.decode()
    assert Experiment.objects.get(pk=exp.pk).status == "running"


def test_a_team_outsider_cannot_see_a_team_experts_experiment(client, django_user_model, expert):
    from django.contrib.auth.models import Group

    expert.team = Group.objects.create(name="dmv-team")
    expert.save()
    exp = services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2)
    django_user_model.objects.create_user("stranger", "s@example.com", PASSWORD)
    client.login(username="stranger", password=PASSWORD)
    assert client.get(reverse("console-experiment", args=[exp.pk])).status_code == 404
    assert exp.name not in client.get(reverse("console-experiments")).content.decode()


def test_the_detail_page_shows_rates_latency_srm_and_the_decision(admin_client, expert):
    from routing.models import Feedback, RoutingEvent

    exp = services.start(services.create_experiment(kind="expert", expert=expert, control_version=1, treatment_version=2))
    for arm, ups in (("control", 60), ("treatment", 90)):
        ids = [f"{arm}-{i}" for i in range(120)]
        RoutingEvent.objects.bulk_create([RoutingEvent(request_id=r, mode="auto", expert="dmv", experiment_id=exp.pk, arm=arm, conversation_id=r, total_ms=120.0 + i % 5, fallback_used=i < 6) for i, r in enumerate(ids)])
        Feedback.objects.bulk_create([Feedback(request_id=r, rating=1 if i < ups else -1) for i, r in enumerate(ids)])
    page = admin_client.get(reverse("console-experiment", args=[exp.pk])).content.decode()
    assert "0.500" in page  # control thumbs-up rate
    assert "0.750" in page  # treatment
    assert "6/120" in page  # fallback guardrail counts, read as a rate
    assert "p50 122.0" in page  # latency guardrail, read as a mean
    assert "(no mismatch)" in page
    outcome = services.read(exp)["decision"]["outcome"]
    assert f'id="decision-outcome"><strong>{outcome}</strong>' in page


def test_a_wrong_expert_or_version_is_an_error_beside_its_field_with_the_input_kept(admin_client, expert):
    response = admin_client.post(reverse("console-experiments"), {**FORM, "name": "Shorter prompt", "expert": "nosuch"})
    assert response.status_code == 400
    page = response.content.decode()
    assert 'id="expert-error"' in page
    assert 'value="Shorter prompt"' in page  # nothing typed is lost
    response = admin_client.post(reverse("console-experiments"), {**FORM, "treatment_version": 7})
    assert response.status_code == 400
    assert 'id="treatment_version-error"' in response.content.decode()
    assert not Experiment.objects.exists()


def test_the_form_offers_the_experts_and_their_versions_and_keeps_statistics_behind_advanced(admin_client, expert):
    page = admin_client.get(reverse("console-experiments")).content.decode()
    assert '<option value="dmv">' in page
    assert "v2, " in page  # versions come from a list, labelled with their state
    assert '<details class="advanced" id="advanced-experiment">' in page
    assert page.index('id="advanced-experiment"') < page.index('name="alpha"')


def test_a_draft_reads_in_plain_words_and_can_be_deleted_but_a_started_one_cannot(admin_client, expert):
    admin_client.post(reverse("console-experiments"), FORM)
    exp = Experiment.objects.get()
    page = admin_client.get(reverse("console-experiment", args=[exp.pk])).content.decode()
    assert "No rated answers in both versions yet: it needs about 7,996 in each." in page
    assert "Not decided yet" in page
    assert page.index('id="summary"') < page.index('id="statistics"')  # the words first, the statistics behind a toggle
    response = admin_client.post(reverse("console-experiment-action", args=[exp.pk, "delete"]))
    assert response.status_code == 302
    assert not Experiment.objects.exists()
    admin_client.post(reverse("console-experiments"), FORM)
    started = Experiment.objects.get()
    admin_client.post(reverse("console-experiment-action", args=[started.pk, "start"]))
    refused = admin_client.post(reverse("console-experiment-action", args=[started.pk, "delete"]))
    assert refused.status_code == 400
    assert "only a draft can be deleted" in refused.content.decode()
    assert Experiment.objects.filter(pk=started.pk).exists()


def test_the_reading_says_how_much_better_b_is_with_its_interval():
    from routing.experiments.wording import summary

    decision = {"outcome": "promote", "reason": "", "primary": {
        "control": {"rate": 0.6, "trials": 8000, "successes": 4800}, "treatment": {"rate": 0.66, "trials": 8000, "successes": 5280},
        "difference": 0.06, "ci": [0.045, 0.075]}}
    words = summary(decision, {"n_control": 7996, "n_treatment": 7996}, "answers rated helpful")
    assert words["headline"] == "B has 10% more answers rated helpful than A (somewhere between +8% and +12%), from 8,000 and 8,000 rated answers."
    assert words["verdict"] == "B is better: you can promote it."
    assert words["needed"] == 0
