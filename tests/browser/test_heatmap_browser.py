"""The heatmap and a training run page in a real browser; screenshots land in /tmp/heatmap.png and /tmp/training.png.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
"""

from __future__ import annotations

import pytest

from routing.models import RouterVersion

from .accounts import PASSWORD, log_in
from .navigation import open_nav
from .traffic import seed_traffic

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_staff_user_reads_the_heatmap_and_activates_a_training_run(live_server, django_user_model, browser_page):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    run = seed_traffic()
    page = browser_page

    log_in(page, "admin", f"{live_server.url}/heatmap/")

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
