"""An experiment created from lists in a real browser, read in plain words, and a draft deleted."""

from __future__ import annotations

import pytest

from experts.models import ExpertVersion
from routing.experiments.models import Experiment
from tests.factories import make_expert

from .accounts import PASSWORD, log_in
from .demo_world import shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def two_versions(django_user_model):
    """A staff admin, and dmv's serving version 1 and candidate version 2: what a new experiment compares."""
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    expert = make_expert("dmv", "Motor Vehicles", public=False)
    ExpertVersion.objects.create(expert=expert, version=1, status="active", system_prompt="Answer briefly.")
    ExpertVersion.objects.create(expert=expert, version=2, status="candidate", system_prompt="Answer briefly, citing the page.")


def test_an_experiment_is_created_from_dropdowns_and_a_draft_is_deleted(live_server, two_versions, browser_page, settings):
    from playwright.sync_api import expect

    settings.GENERATOR = "transformers"  # a prompt experiment needs a model that reads the prompt
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


# Each of the new-experiment form's lists: how much narrower it is than its longest option needs (0: every option reads whole).
CUT_OFF = """[...document.querySelectorAll('#new-experiment .train-form:not(details *) select')].map(select => {
    const whole = select.cloneNode(true);
    whole.style.cssText = 'position: absolute; visibility: hidden; width: auto; max-width: none; min-width: 0';
    document.body.appendChild(whole);
    const short = Math.max(0, whole.getBoundingClientRect().width - select.getBoundingClientRect().width);
    whole.remove();
    return [select.id, Math.round(short)];
})"""
# Each main field's control with its top, and its field's top: fields side by side must have their controls in line.
CONTROLS = """[...document.querySelectorAll('#new-experiment .train-form:not(details *) > .param')].map(param => [
    param.querySelector('input, select').id, Math.round(param.getBoundingClientRect().top),
    Math.round(param.querySelector('input, select').getBoundingClientRect().top)])"""


def test_the_new_experiment_forms_lists_read_whole_and_line_up_on_a_laptop(live_server, two_versions, browser_page):
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/experiments/")
    for width in (1280, 1024, 800, 390):
        page.set_viewport_size({"width": width, "height": 900})
        cut = {select: px for select, px in page.evaluate(CUT_OFF) if px > 1}
        rows: dict[int, set[int]] = {}
        for _, field_top, control_top in page.evaluate(CONTROLS):
            rows.setdefault(field_top, set()).add(control_top)
        if (cut and width >= 800) or any(len(tops) > 1 for tops in rows.values()):
            shot(page, f"experiment-form-{width}")
        if width >= 800:  # a phone's list is too narrow for a long version label: its picker shows it whole
            assert cut == {}, width  # at 1280 px "Two versions of an expert" read "Two versions of an exp"
        assert all(len(tops) == 1 for tops in rows.values()), (width, rows)  # a wrapped label pushed its list below its neighbours'
        assert page.evaluate("document.documentElement.scrollWidth") <= width
