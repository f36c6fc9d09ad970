"""The demo walk for a domain team, in a real browser: log in, overview → heatmap → expert page →
playground question → label a misroute in the review queue → start a router training and watch it
to the end; then a team member is refused another team's expert. A phone-width overview too.

Screenshots of every page are test artefacts in ``var/test-artifacts/screenshots/`` (git-ignored;
``SCREENSHOT_DIR`` overrides it). The training is real (the labelled questions, the reviewed one
included, embedded with the configured encoder); it runs in a background thread, as a worker would,
so the job page's progress is watched live.
"""

from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import Group
from django.db import connection

from jobs.models import Job
from labeling.models import ReviewDecision
from routing import tasks
from routing.models import TrainingRun
from serving import chat

from .accounts import PASSWORD, log_in
from .demo_world import MISROUTED, seed_demo_world, shot
from .navigation import open_nav
from .playground import fake_answer, fake_open_stream

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

def train_in_background(monkeypatch) -> None:
    """Send the training task to a thread instead of running it inside the request (as a worker would)."""

    def start(job_id: int) -> None:
        def work() -> None:
            try:
                tasks.train_router(job_id)
            finally:
                connection.close()

        threading.Thread(target=work, daemon=True).start()

    monkeypatch.setattr(tasks.train_router, "delay", start)
    monkeypatch.setattr(tasks.train_router, "apply_async", lambda args=(), **kwargs: start(args[0]))


def test_the_demo_walk_for_a_domain_team(live_server, django_user_model, browser_page, monkeypatch):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    rita = django_user_model.objects.create_user("rita", "rita@example.com", PASSWORD)
    seed_demo_world()
    rita.groups.add(Group.objects.get(name="roads"))
    monkeypatch.setattr(chat, "answer", fake_answer)
    monkeypatch.setattr(chat, "open_stream", fake_open_stream)
    train_in_background(monkeypatch)
    page, base = browser_page, live_server.url

    # Log in; the overview: traffic, experts with circuit state and load share, the router, the alarm.
    log_in(page, "admin", f"{base}/")
    expect(page.locator("h1")).to_have_text("Overview")
    expect(page.locator("#traffic-week")).not_to_have_text("0")
    expect(page.locator("#experts tr[data-expert='dmv']")).to_contain_text("closed")
    expect(page.locator("#experts tr[data-expert='dmv'] .share")).to_contain_text("over")  # 4 of every 7 requests
    expect(page.locator("#load-alarm")).to_contain_text("Motor Vehicles")
    expect(page.locator("#router-version")).to_have_text("v1")
    shot(page, "01-overview")

    # Heatmap: a week by day, the share chart drawn from the page's data, the alarm.
    page.click("nav >> text=Heatmap")
    page.click("text=Last 7 days, by day")
    expect(page.locator("#heatmap tr[data-expert='dmv'] td").first).not_to_have_text("0")
    expect(page.locator("#share-chart[data-ready='true'] canvas")).to_be_visible()
    expect(page.locator("#shares tr[data-expert='dmv']")).to_contain_text("over threshold")
    expect(page.locator("#alarm")).to_contain_text("Motor Vehicles")
    shot(page, "02-heatmap")

    # The expert page: team, knowledge, traffic, the thumbs-down (no other expert named yet: an unhelpful answer, not a misroute).
    page.click("nav >> text=Overview")
    page.click("#experts >> text=Motor Vehicles")
    expect(page.locator("h1")).to_have_text("Motor Vehicles")
    expect(page.locator("#expert-facts")).to_contain_text("team roads")
    expect(page.locator("#kb-counts")).to_contain_text("3 documents")
    expect(page.locator("#unhelpful")).to_contain_text(MISROUTED)
    expect(page.locator("#unhelpful")).to_contain_text("This is about pensions")
    expect(page.locator("#misroutes")).not_to_contain_text(MISROUTED)
    shot(page, "03-expert")

    # Playground: a question answered in place, with the routing path and the latency split.
    page.click("nav >> text=Playground")
    page.fill("#id_question", "How do I renew my driver's license?")
    page.click("button:has-text('Ask')")
    expect(page.locator("#routing-path li.chosen")).to_contain_text("Motor Vehicles")
    expect(page.locator("#latency")).to_contain_text("75.0 ms")
    shot(page, "04-playground")

    # Review queue: the misrouted question is labelled with the right expert.
    page.click("nav >> text=Review")
    item = page.locator("li.review-item[data-request='chatcmpl-misroute']")
    expect(item).to_contain_text(MISROUTED)
    expect(item).to_contain_text("thumbs down")
    shot(page, "05-review")
    # Its trace: the question, the router's scores, the thumbs-down with its comment.
    item.locator("a:has-text('trace')").click()
    expect(page.locator("h1")).to_have_text("Why this answer")
    expect(page.locator("#trace-question")).to_contain_text(MISROUTED)
    expect(page.locator("#trace-feedback")).to_contain_text("This is about pensions")
    shot(page, "05a-trace")
    # "Wrong expert": the right one is reported from the trace, and the review queue proposes it.
    page.locator("#feedback-form select").select_option("ssa")
    page.click("#feedback-form button:has-text('Report')")
    expect(page.locator(".notice.success")).to_contain_text("it should have gone to Social Security")
    expect(page.locator("#feedback-given")).to_contain_text("should have gone to Social Security")
    page.click("nav >> text=Review")
    expect(item).to_contain_text("it should have gone to Social Security")
    assert item.locator("select").input_value() == "ssa"
    item.locator("button:has-text('Label')").click()
    expect(page.locator(".notice.success")).to_contain_text("Labelled for Social Security")
    expect(page.locator("li.review-item[data-request='chatcmpl-misroute']")).to_have_count(0)
    expect(page.locator("#recent-decisions")).to_contain_text("misroute")
    page.goto(f"{base}/heatmap/?window=7d")
    expect(page.locator("#review-confusion")).to_contain_text("1 ✕")  # routed to dmv, belongs to ssa
    shot(page, "05b-heatmap-confusion")
    decision = ReviewDecision.objects.get(request_id="chatcmpl-misroute")
    assert decision.expert.slug == "ssa"
    assert decision.query.text == MISROUTED

    # Training: start a run with the form, watch its job to the end, then open the new run.
    open_nav(page, "experts", "Training")
    expect(page.locator("#activation-policy")).to_contain_text("only if it sends held-out questions to the right expert")
    page.check("#activation-policy input[value='always']")  # an explicit choice: this version goes live when trained
    page.click("#advanced-training summary")
    page.fill("#id_epochs", "30")
    page.click("#train-submit")
    expect(page.locator("h1")).to_have_text("Train router")
    expect(page.locator("#job-body")).to_contain_text("Succeeded", timeout=120_000)
    expect(page.locator("#job-body progress")).to_have_attribute("value", "100")
    shot(page, "06-training-job")
    job = Job.objects.get(kind="train_router")
    assert job.params["epochs"] == 30
    assert job.status == "succeeded"
    run = TrainingRun.objects.get()
    assert run.router_version.is_active
    assert run.router_version.version == 2
    assert run.n_train + run.n_val == 25  # 24 seeded questions and the reviewed one
    page.goto(f"{base}/training/{run.pk}/")
    expect(page.locator("#active-marker")).to_be_visible()
    expect(page.locator("#loss-chart[data-ready='true'] canvas")).to_be_visible()
    expect(page.locator("#out-of-scope")).to_contain_text("turns a question away when it is like nothing the experts were trained on")
    expect(page.locator("#similar-questions")).to_contain_text("training questions most like each question")
    shot(page, "07-training-run")
    page.goto(f"{base}/jobs/")
    shot(page, "08-jobs")

    # Phone width: the overview still reads (no sideways scrolling of the page itself).
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{base}/")
    expect(page.locator("h1")).to_have_text("Overview")
    assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1
    shot(page, "09-overview-phone")
    for path in ("/traces/", "/traces/chatcmpl-misroute/", f"/training/{run.pk}/"):
        page.goto(f"{base}{path}")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390 + 1, path
    shot(page, "09b-trace-phone")
    page.set_viewport_size({"width": 1280, "height": 1000})

    # A team member: their own expert opens, another team's is not found and shows nothing of it.
    page.click("button:has-text('Log out')")
    log_in(page, "rita", f"{base}/experts/dmv/")
    expect(page.locator("h1")).to_have_text("Motor Vehicles")
    response = page.goto(f"{base}/experts/ssa/")
    assert response.status == 404
    expect(page.locator("#not-found")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("Social Security")
    shot(page, "10-denied")
    # ...nor another team's traces or alarms.
    from routing.alarms.models import Alarm

    Alarm.objects.create(kind="load", key="load:ssa", subject="ssa", message="Expert ssa answered 60% of 400 requests")
    page.goto(f"{base}/traces/")
    expect(page.locator("#traces")).to_contain_text("Motor Vehicles")
    expect(page.locator("#traces")).not_to_contain_text("ssa")
    expect(page.locator("#traces")).not_to_contain_text("Social Security")
    assert page.goto(f"{base}/traces/ssa-0-0/").status == 404
    page.goto(f"{base}/alarms/")
    expect(page.locator("body")).not_to_contain_text("Expert ssa answered")
