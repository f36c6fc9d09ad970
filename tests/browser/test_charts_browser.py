"""The charts drawn by the vendored Chart.js from the JSON the pages fetch, on a laptop and a phone screen.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
Screenshots land in /tmp/charts-*.png.
"""

from __future__ import annotations

import pytest

from .accounts import PASSWORD, log_in
from .traffic import seed_traffic

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

PHONE = {"width": 390, "height": 844}


def datasets(page, figure: str) -> list[dict]:
    """Each dataset's label, numbers and dash pattern as Chart.js holds them for the figure's chart."""
    return page.evaluate(
        """(sel) => document.querySelector(sel).chart.data.datasets.map(d => ({
            label: d.label, data: d.data, dash: d.borderDash || [], point: d.pointStyle || null}))""",
        figure,
    )


def no_horizontal_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)


def test_the_heatmap_share_chart_is_drawn_from_the_fetched_json(live_server, staff, browser_page):
    from playwright.sync_api import expect

    seed_traffic()
    page = browser_page
    outside = []
    page.on("request", lambda r: outside.append(r.url) if not r.url.startswith(live_server.url) else None)
    log_in(page, "admin", f"{live_server.url}/heatmap/")

    figure = page.locator("#share-chart")
    expect(figure).to_have_attribute("data-ready", "true")
    expect(figure.locator("canvas")).to_be_visible()
    expect(figure.locator(".chart-fallback")).to_be_hidden()
    expect(figure.locator("figcaption")).to_contain_text("hatched bars marked “over”")
    share, over = datasets(page, "#share-chart")
    assert "hatched" in over["label"]
    labels = page.evaluate("document.querySelector('#share-chart').chart.data.labels")
    assert "Motor Vehicles (over)" in labels
    dmv = labels.index("Motor Vehicles (over)")
    assert share["data"][dmv] is None
    assert over["data"][dmv] > 40
    # The table view holds the same number the bar shows.
    expect(page.locator("#shares tr[data-expert='dmv'] td.share")).to_have_text(f"{over['data'][dmv]:.1f}%")
    assert outside == []  # the library is served by the console, no CDN
    page.screenshot(path="/tmp/charts-heatmap.png", full_page=True)

    page.set_viewport_size(PHONE)
    page.reload()
    expect(figure).to_have_attribute("data-ready", "true")
    box = figure.locator("canvas").bounding_box()
    assert 0 < box["width"] <= PHONE["width"]
    assert box["x"] >= 0
    figure_box = figure.bounding_box()
    assert figure_box["x"] + figure_box["width"] <= PHONE["width"]
    page.screenshot(path="/tmp/charts-heatmap-phone.png", full_page=True)


def test_a_training_run_draws_its_curves_with_a_table_view_on_a_laptop_and_a_phone(live_server, staff, browser_page):
    from playwright.sync_api import expect

    run = seed_traffic()
    page = browser_page
    log_in(page, "admin", f"{live_server.url}/training/{run.pk}/")
    assert "{#" not in page.content()

    for figure in ("#loss-chart", "#accuracy-chart"):
        expect(page.locator(figure)).to_have_attribute("data-ready", "true")
        expect(page.locator(f"{figure} canvas")).to_be_visible()
        expect(page.locator(f"{figure} .chart-fallback")).to_be_hidden()
    train, val = datasets(page, "#loss-chart")
    assert train["label"].startswith("train loss (solid")
    assert val["label"].startswith("validation loss (dashed")
    assert train["dash"] == []
    assert val["dash"] != []
    assert train["point"] != val["point"]
    assert len(train["data"]) == 12
    (accuracy,) = datasets(page, "#accuracy-chart")
    assert accuracy["data"][-1] == pytest.approx(0.95)

    page.click("#history >> xpath=ancestor::details/summary")
    table = page.locator("#history tbody tr")
    expect(table).to_have_count(12)
    expect(table.nth(0).locator("td").nth(1)).to_have_text(f"{train['data'][0]:.4f}")
    page.screenshot(path="/tmp/charts-training.png", full_page=True)

    page.set_viewport_size(PHONE)
    page.reload()
    expect(page.locator("#loss-chart")).to_have_attribute("data-ready", "true")
    box = page.locator("#loss-chart canvas").bounding_box()
    assert 0 < box["width"] <= PHONE["width"] - 20
    assert box["x"] >= 0
    assert no_horizontal_scroll(page)
    page.screenshot(path="/tmp/charts-training-phone.png", full_page=True)


def test_the_compare_page_draws_both_runs_curves(live_server, staff, browser_page):
    from playwright.sync_api import expect

    from routing.models import TrainingRun

    run = seed_traffic()
    other = TrainingRun.objects.create(params={}, history=[{"epoch": 1, "train_loss": 0.9, "val_loss": 1.0, "val_accuracy": 0.7}], metrics={})
    page = browser_page
    log_in(page, "admin", f"{live_server.url}/training/compare/?a={run.pk}&b={other.pk}")

    for figure in ("#loss-a", "#loss-b", "#acc-a", "#acc-b"):
        expect(page.locator(figure)).to_have_attribute("data-ready", "true")
    assert datasets(page, "#loss-b")[0]["data"] == [0.9]
    page.click("text=Table view, run B")
    expect(page.locator("#history-b tbody tr")).to_have_count(1)
    expect(page.locator("#history-b")).to_contain_text("0.9000")
