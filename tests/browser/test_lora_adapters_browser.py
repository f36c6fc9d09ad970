"""The adapters console in a real browser: write an example, save prompts as versions, roll back after confirming.

Run with ``pytest -m browser tests/browser -k lora``; it needs Debian's Chromium and skips without it.
A screenshot lands in /tmp/lora-adapters.png for a human to look at.
"""

from __future__ import annotations

import pytest

from experts.models import ExpertVersion, TrainingExample
from tests.factories import make_expert

from .accounts import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_lora_a_team_edits_training_data_and_prompts_and_rolls_back(live_server, django_user_model, browser_page):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD, is_staff=True)
    make_expert("dmv", "Motor Vehicles", public=False)
    page = browser_page
    page.goto(f"{live_server.url}/experts/dmv/adapters/data/", timeout=60_000)  # the first request imports the console
    log_in(page, "owner")
    expect(page.locator("h1")).to_have_text("Motor Vehicles: training data")
    page.fill("#id_question", "How do I renew my licence?")
    page.fill("#id_answer", "Renew it online before it expires [1].")
    page.click("button:has-text('Add')")
    expect(page.locator("#examples")).to_contain_text("How do I renew my licence?")
    assert TrainingExample.objects.count() == 1

    page.click("nav.breadcrumbs >> text=adapters")
    expect(page.locator("#versions-card")).to_contain_text("No versions yet")
    for prompt in ("You answer for the DMV.", "Be brief."):
        page.fill("#id_system_prompt", prompt)
        page.click("button:has-text('Save prompt')")
        expect(page.locator(".notice.success")).to_contain_text("now serving")
    expect(page.locator("#version-2")).to_contain_text("Active")

    page.once("dialog", lambda dialog: dialog.dismiss())  # changing one's mind changes nothing
    page.click("button[aria-label='Activate v1']")
    assert ExpertVersion.objects.get(status="active").version == 2
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("button[aria-label='Activate v1']")
    expect(page.locator(".notice.success")).to_contain_text("v1 now serves Motor Vehicles")
    expect(page.locator("#version-1")).to_contain_text("Active")
    page.screenshot(path="/tmp/lora-adapters.png", full_page=True)
