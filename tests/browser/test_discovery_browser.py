"""Reviewing expert proposals in a real browser: rename, merge and undo through htmx, without reloading the page.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
The screenshot lands in /tmp/discovery.png for a human to look at.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from django.conf import settings
from django.contrib.auth.models import Group

from labeling import services
from labeling.models import ClusteringRun, Embedding, Query
from sbcommon.hashing import text_hash

from .accounts import PASSWORD, log_in

SCREENSHOT = Path("/tmp/discovery.png")
TOPICS = {
    0: ["renew driving licence", "replace a lost driving licence", "driving licence address change", "provisional driving licence fee"],
    1: ["passport appointment online", "urgent passport appointment", "child passport photo rules", "passport renewal form"],
    2: ["state pension age check", "claim state pension abroad", "pension credit eligibility", "state pension forecast"],
}

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def seed(team: Group) -> ClusteringRun:
    """Three topics of ``team``'s queries with hand-made embeddings (no encoder), clustered by the real service."""
    rng = np.random.default_rng(0)
    for axis, texts in TOPICS.items():
        for text in texts:
            for variant in range(2):
                full = f"{text} {'please' if variant else 'help'}"
                vector = np.zeros(16, dtype=np.float32)
                vector[axis] = 1.0
                vector += 0.03 * rng.normal(size=16).astype(np.float32)
                Query.objects.create(text=full, text_hash=text_hash(full), row_hash=text_hash("b:" + full), source="helpdesk", team=team)
                Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=text_hash(full), vector=(vector / np.linalg.norm(vector)).astype("<f4").tobytes())
    return services.cluster_queries(source="helpdesk", eps=0.2, min_samples=3, n_experts=3, attach_noise=False, team=team)




def test_a_reviewer_renames_merges_and_undoes_on_the_run_page(live_server, django_user_model, browser_page):
    from playwright.sync_api import expect

    team = Group.objects.create(name="Reviewers")
    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD).groups.add(team)  # the run's team reviews it
    run = seed(team)
    assert run.proposals.count() == 3
    page = browser_page

    # Anonymous: sent to the login page, then back to Discovery.
    page.goto(f"{live_server.url}/discovery/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/discovery/")
    log_in(page, "owner")
    expect(page.locator("h1")).to_have_text("Discovery")
    page.click(f"text=Clustering #{run.pk}")
    expect(page.locator("h1")).to_have_text(f"Clustering #{run.pk}")
    expect(page.locator("#open-count")).to_have_text("3")
    page.evaluate("window.notReloaded = true")  # survives only if htmx swaps fragments instead of loading pages

    licences = page.locator("article.proposal", has_text="renew driving licence")
    passports = page.locator("article.proposal", has_text="passport appointment online")
    pensions = page.locator("article.proposal", has_text="state pension age check")
    expect(licences.locator(".size")).to_have_text("8")
    expect(licences.locator(".share")).to_have_text("33.3%")

    # Rename.
    licences.locator("input[name=name]").fill("Driving licences")
    licences.locator("button:has-text('Rename')").click()
    expect(page.locator("#review-notice")).to_contain_text("to 'Driving licences'")
    expect(page.locator("article.proposal .proposal-name", has_text="Driving licences")).to_have_count(1)

    # Merge passports and pensions into passports.
    passports.locator("input.merge-select").check()
    pensions.locator("input.merge-select").check()
    page.select_option("#merge-target", label=passports.locator(".proposal-name").inner_text())
    page.click("#merge-button")
    expect(page.locator("#open-count")).to_have_text("2")
    expect(page.locator("#review-notice")).to_contain_text("Merged 2 proposals")
    expect(page.locator("article.proposal", has_text="passport appointment online").locator(".size")).to_have_text("16")
    expect(page.locator("#closed")).to_contain_text("Merged into another")

    # Undo the merge, then the rename.
    expect(page.locator("#undo-button")).to_contain_text("Undo: Merged")
    page.click("#undo-button")
    expect(page.locator("#open-count")).to_have_text("3")
    expect(page.locator("#review-notice")).to_contain_text("Undid: Merged")
    expect(page.locator("#undo-button")).to_contain_text("Undo: Renamed")
    page.click("#undo-button")
    expect(page.locator("#review-notice")).to_contain_text("Undid: Renamed")
    expect(page.locator("article.proposal .proposal-name", has_text="Driving licences")).to_have_count(0)
    expect(page.locator("#undo-button")).to_have_count(0)
    expect(page.locator("#history li.undone")).to_have_count(2)
    assert page.evaluate("window.notReloaded") is True
    assert page.url == f"{live_server.url}/discovery/runs/{run.pk}/"

    # Rename once more, to leave something worth looking at in the screenshot.
    page.locator("article.proposal", has_text="renew driving licence").locator("input[name=name]").fill("Driving licences")
    page.locator("article.proposal", has_text="renew driving licence").locator("button:has-text('Rename')").click()
    expect(page.locator("#review-notice")).to_contain_text("to 'Driving licences'")
    page.screenshot(path=str(SCREENSHOT), full_page=True)


@pytest.mark.parametrize("width", [1280, 390])
def test_a_reviewer_moves_every_question_holding_some_words_in_one_step(live_server, django_user_model, browser_page, width):
    from playwright.sync_api import expect

    team = Group.objects.create(name="Reviewers")
    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD).groups.add(team)
    run = seed(team)
    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    log_in(page, "owner", f"{live_server.url}/login/?next=/discovery/runs/{run.pk}/")
    licences = page.locator("article.proposal", has_text="renew driving licence")
    target = licences.locator(".proposal-name").inner_text()

    page.fill("#move-matching", "passport")
    page.select_option("#move-matching-target", label=target)
    page.click("#move-matching-button")

    expect(page.locator("#review-notice")).to_contain_text(f"Moved 8 queries matching 'passport' to {target}.")
    expect(page.locator("article.proposal", has_text="renew driving licence").locator(".size")).to_have_text("16")
    page.screenshot(path=f"/tmp/discovery-move-{width}.png", full_page=True)
    wide = page.evaluate("[...document.querySelectorAll('#run-body *')].filter(e => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1).map(e => e.tagName + '#' + e.id + '.' + e.className).slice(0, 8)")
    assert page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth") <= 0, wide
    page.click("#undo-button")
    expect(page.locator("#review-notice")).to_contain_text("Undid: Moved 8 queries matching 'passport'")
    page.screenshot(path=f"/tmp/discovery-move-{width}.png", full_page=True)
