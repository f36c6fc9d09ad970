"""The demo walk for a domain team, in a real browser: log in, overview → heatmap → expert page →
playground question → label a misroute in the review queue → start a router training and watch it
to the end; then a team member is refused another team's expert. A phone-width overview too.

Screenshots of every page are test artefacts in ``var/test-artifacts/screenshots/`` (git-ignored;
``SCREENSHOT_DIR`` overrides it). The training is real (the labelled questions, the reviewed one
included, embedded with the configured encoder); it runs in a background thread, as a worker would,
so the job page's progress is watched live.
"""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from experts.models import Expert
from jobs.models import Job
from knowledge.models import Document
from labeling.models import Assignment, ClusteringRun, Proposal, Query, ReviewDecision
from routing import tasks
from routing.models import Feedback, RouterVersion, RoutingEvent, TrainingRun
from sbcommon.hashing import text_hash
from serving import chat

from .navigation import open_nav
from .test_console_browser import fake_answer, fake_open_stream

PASSWORD = "correct horse battery staple"
SCREENSHOTS = Path(os.environ.get("SCREENSHOT_DIR") or Path(settings.BASE_DIR) / "var" / "test-artifacts" / "screenshots")
MISROUTED = "When can I start drawing my retirement pension?"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

QUESTIONS = {
    "dmv": ["renew my driver license online", "replace a lost driving licence", "register a new car", "book a road test appointment",
            "change the address on my license", "get a learner permit", "transfer a vehicle title", "order new licence plates"],
    "ssa": ["apply for retirement benefits", "replace my social security card", "check my benefit payment date", "report a change of address to social security",
            "apply for disability benefits", "get a benefit verification letter", "survivor benefits for a spouse", "when do retirement benefits start"],
    "va": ["apply for veterans health care", "file a disability compensation claim", "use the GI bill for college", "find a VA medical center",
           "veteran pension eligibility", "request military service records", "VA home loan certificate", "burial benefits for veterans"],
}


def seed() -> None:
    """Three team-owned experts, a week of traffic, a misrouted low-confidence question with a thumbs-down,
    an active router, and a promoted clustering run with labelled questions to train the next router on."""
    roads, benefits = Group.objects.create(name="roads"), Group.objects.create(name="benefits")
    experts = {
        "dmv": Expert.objects.create(slug="dmv", name="Motor Vehicles", team=roads, description="Driver licences, vehicle registration and plates."),
        "ssa": Expert.objects.create(slug="ssa", name="Social Security", team=benefits, description="Retirement, disability and survivor benefits."),
        "va": Expert.objects.create(slug="va", name="Veterans Affairs", team=benefits, description="Health care, pensions and education for veterans."),
    }
    for slug, expert in experts.items():
        for i in range(3):
            Document.objects.create(expert=expert, external_id=f"{slug}-{i}", title=f"{expert.name} guide {i}", content_hash=f"{slug}{i}", text="…", chunk_count=4)
    now = timezone.now()
    for hour in range(0, 24 * 7, 3):
        for slug, n in (("dmv", 4), ("ssa", 2), ("va", 1)):
            for i in range(n):
                e = RoutingEvent.objects.create(request_id=f"{slug}-{hour}-{i}", mode="auto", router_version=1, expert=slug,
                                                experts=[{"slug": slug, "score": 0.92}, {"slug": "va" if slug != "va" else "ssa", "score": 0.05}])
                RoutingEvent.objects.filter(pk=e.pk).update(created_at=now - timedelta(hours=hour))
    RoutingEvent.objects.create(request_id="chatcmpl-misroute", mode="auto", router_version=1, expert="dmv", question=MISROUTED,
                                experts=[{"slug": "dmv", "score": 0.44}, {"slug": "ssa", "score": 0.41}, {"slug": "va", "score": 0.15}])
    Feedback.objects.create(request_id="chatcmpl-misroute", rating=-1, expert="dmv", comment="This is about pensions, not driving.")
    RouterVersion.objects.create(version=1, path="/nowhere/v1", experts=["dmv", "ssa", "va"], embedding_model=settings.EMBEDDING_MODEL,
                                 data_fingerprint="seed", metrics={"val": {"accuracy": 0.91}}, is_active=True)
    run = ClusteringRun.objects.create(model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=3, fingerprint="walk", status="promoted", n_queries=24)
    for index, (slug, texts) in enumerate(QUESTIONS.items()):
        proposal = Proposal.objects.create(run=run, index=index, name=experts[slug].name, status="promoted", expert=experts[slug], size=len(texts))
        for text in texts:
            q = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash(f"walk:{text}"), source="walk")
            Assignment.objects.create(run=run, query=q, topic=index, proposal=proposal)


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


def shot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def log_in(page, base: str, username: str, next_path: str = "/") -> None:
    page.goto(f"{base}{next_path}")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Log in')")


def test_the_demo_walk_for_a_domain_team(live_server, django_user_model, browser_page, monkeypatch):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    rita = django_user_model.objects.create_user("rita", "rita@example.com", PASSWORD)
    seed()
    rita.groups.add(Group.objects.get(name="roads"))
    monkeypatch.setattr(chat, "answer", fake_answer)
    monkeypatch.setattr(chat, "open_stream", fake_open_stream)
    train_in_background(monkeypatch)
    page, base = browser_page, live_server.url

    # Log in; the overview: traffic, experts with circuit state and load share, the router, the alarm.
    log_in(page, base, "admin")
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

    # The expert page: team, knowledge, traffic, the reported misroute.
    page.click("nav >> text=Overview")
    page.click("#experts >> text=Motor Vehicles")
    expect(page.locator("h1")).to_have_text("Motor Vehicles")
    expect(page.locator("#expert-facts")).to_contain_text("team roads")
    expect(page.locator("#kb-counts")).to_contain_text("3 documents")
    expect(page.locator("#misroutes")).to_contain_text(MISROUTED)
    expect(page.locator("#misroutes")).to_contain_text("This is about pensions")
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
    log_in(page, base, "rita", "/experts/dmv/")
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
