"""An experiment created from lists in a real browser, read in plain words, and a draft deleted."""

from __future__ import annotations

import pytest

from experts.models import ExpertVersion
from routing.experiments.models import Experiment
from tests.factories import make_expert

from .accounts import PASSWORD, log_in
from .demo_world import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_an_experiment_is_created_from_dropdowns_and_a_draft_is_deleted(live_server, django_user_model, browser_page, settings):
    from playwright.sync_api import expect

    settings.GENERATOR = "transformers"  # a prompt experiment needs a model that reads the prompt
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    expert = make_expert("dmv", "Motor Vehicles", public=False)
    ExpertVersion.objects.create(expert=expert, version=1, status="active", system_prompt="Answer briefly.")
    ExpertVersion.objects.create(expert=expert, version=2, status="candidate", system_prompt="Answer briefly, citing the page.")
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/experiments/")
    page.fill("#id_name", "Citing the page")
    page.select_option("#id_expert", "dmv")
    page.select_option("#id_control_version", label="Motor Vehicles: v1, serving now")
    page.select_option("#id_treatment_version", label="Motor Vehicles: v2, candidate")
    expect(page.locator("#id_alpha")).to_be_hidden()  # statistics stay behind "Advanced settings"
    page.click("#create-experiment")
    expect(page.locator("h1")).to_have_text("Citing the page")
    expect(page.locator("#summary-headline")).to_contain_text("No rated answers in both versions yet")
    expect(page.locator("#summary-needed")).to_contain_text("7996")
    expect(page.locator("#planned-n")).to_be_hidden()  # behind the Statistics toggle
    page.click("#statistics summary")
    expect(page.locator("#planned-n")).to_contain_text("7996 control and 7996 treatment")
    shot(page, "experiment-draft")
    page.click("#delete-draft")
    expect(page.locator(".notice.success")).to_contain_text("deleted")
    assert not Experiment.objects.exists()
