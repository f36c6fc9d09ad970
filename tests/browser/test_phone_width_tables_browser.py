"""The console tables a first walk saw empty, now with rows in them: the alarms page's drift checks and nightly
evaluations, the schedules, an experiment's metrics and offline figures, a clustering run's unassigned queries and
closed proposals. Each fits its card at a phone's width (390 px) and at a laptop's (1280 px); the Discovery list's
clustering runs fit a small laptop's card too (1024 px: it scrolled 39 px sideways there).

With these rows, before their tables stacked on a phone, they overflowed their cards at 390 px by: drift checks 134 px,
nightly evaluations 270, schedules 49, an experiment's metrics 280 and offline figures 233, a run's unassigned queries 391
(a long unbroken question); and the clustering runs by 83 px at 1024 px.
"""

from __future__ import annotations

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from experts.models import Expert, ExpertVersion
from jobs.models import Job
from labeling.models import Assignment, ClusteringRun, Proposal, Query
from routing.alarms.models import Alarm, DriftReport, EvaluationSnapshot
from routing.experiments.models import Experiment
from routing.models import Feedback, RoutingEvent
from routing.schedules.scheduling import DEFAULTS, ensure_schedules
from sbcommon.hashing import text_hash

from .accounts import PASSWORD, log_in
from .demo_world import seed_demo_world, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
SMALL_LAPTOP = {"width": 1024, "height": 800}
DESKTOP = {"width": 1280, "height": 1000}
# Each visible table-wrap's table (its id, or its section's) with how far the table overflows its box; a table that fits reads 0.
TABLE_OVERFLOW = """[...document.querySelectorAll('.table-wrap')].filter(w => w.offsetParent !== null).map(w => [
    w.querySelector('table').id || w.closest('section').id || 'table', w.scrollWidth - w.clientWidth])"""


def seed_tables() -> dict[str, tuple[list[str], tuple[dict[str, int], ...]]]:
    """Rows for each table, as the platform writes them; each page's path with its tables and the widths to read it at."""
    dmv = Expert.objects.get(slug="dmv")
    # Alarms: an open one, a drift check of each kind, two nightly evaluations.
    Alarm.objects.create(kind="drift", key="drift:router", subject="router v1", experts=[],
                         message="Recent questions drifted from the router's training data: C2ST AUC 0.71 (p 0.001); abstain rate 0.18 vs 0.04 in training",
                         proposal="Review recent low-confidence and abstained questions, label them, and retrain the router (Training); re-cluster if a new topic appears.")
    DriftReport.objects.create(router_version=1, n_recent=3, n_reference=240, reason="not enough data (3 recent questions, 240 training questions; need 10 each)")
    DriftReport.objects.create(router_version=1, n_recent=1200, n_reference=2400, drifted=True,
                               metrics={"mean_shift": 0.08312, "mean_shift_p": 0.0004, "c2st_auc": 0.713, "c2st_p": 0.001},
                               reason="C2ST AUC 0.713 above 0.6 (p 0.001); abstain rate 0.18 vs 0.04 in training")
    for accuracy in (0.912, 0.874):
        EvaluationSnapshot.objects.create(router_version=1, metrics={"router_accuracy": accuracy, "requests": 1843, "thumbs_up_rate": 0.8125,
                                                                     "fallback_rate": 0.0421, "abstain_rate": 0.0312})
    # Schedules: the defaults, each with a last outcome and its message.
    ensure_schedules(settings.TIME_ZONE)
    for s in DEFAULTS:
        Job.objects.create(kind=f"scheduled_{s.name}", title=s.name, status="succeeded", progress=1.0, params={"schedule": s.name},
                           message="Compared 1,200 recent questions with 2,400 training questions: no significant drift", finished_at=timezone.now())
    # An expert experiment with rated answers in both arms, and each version's own evaluation.
    ExpertVersion.objects.create(expert=dmv, version=1, status="active", system_prompt="Answer briefly.", knowledge_snapshot="2025-01-14T09:32:11.482913+00:00",
                                 metrics={"eval_loss": 1.2841, "perplexity": 3.6118, "answer_recall": 0.5312, "faithfulness": 0.9120})
    ExpertVersion.objects.create(expert=dmv, version=2, status="candidate", system_prompt="Answer briefly, citing the page.",
                                 knowledge_snapshot="2025-02-03T17:05:48.019264+00:00",
                                 metrics={"eval_loss": 1.1907, "perplexity": 3.2894, "answer_recall": 0.5504, "faithfulness": 0.9287})
    experiment = Experiment.objects.create(name="Citing the page", expert=dmv, kind="expert", target="expert:dmv", salt="tables",
                                           control_version=1, treatment_version=2, status="running")
    for i in range(60):
        arm = "control" if i % 2 else "treatment"
        RoutingEvent.objects.create(request_id=f"ab-{i}", mode="auto", router_version=1, expert="dmv", experiment_id=experiment.pk, arm=arm,
                                    conversation_id=f"conv-{i}", total_ms=840 + 37 * i, fallback_used=i % 7 == 0, abstained=i % 11 == 0)
        Feedback.objects.create(request_id=f"ab-{i}", rating=1 if i % 3 else -1, expert="dmv")
    # A clustering run in review: an open proposal, two closed ones, and questions the clustering could not place.
    team = dmv.team
    team.name = "Roads, licensing and vehicle registration (state DMV)"
    team.save()
    run = ClusteringRun.objects.create(model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=3, fingerprint="tables", status="draft",
                                       n_queries=12, n_topics=3, noise_share=0.25, team=team, source="help-desk-export-2025-01-full-year.csv")
    open_ = Proposal.objects.create(run=run, index=0, name="Vehicle registration renewals and late fees", size=6, keywords=["registration", "renew", "fee"])
    Proposal.objects.create(run=run, index=1, name="Licence plates: personalised, replacement and transfer", status="merged", merged_into=open_, size=2)
    Proposal.objects.create(run=run, index=2, name="Miscellaneous", status="discarded", size=1)
    texts = ["renew my vehicle registration after it lapsed", "late fee for registration renewal", "registration sticker never arrived"]
    noise = ["Iwouldliketoknowwhetherthedepartmentacceptspaymentbycheque", "can I bring my dog to the road test appointment next Tuesday morning?",
             "https://example.gov/forms/application-for-duplicate-certificate-of-title-and-registration.pdf"]
    for text in texts + noise:
        q = Query.objects.create(text=text, text_hash=text_hash(text), row_hash=text_hash(f"tables:{text}"), source="help-desk")
        Assignment.objects.create(run=run, query=q, topic=-1 if text in noise else 0, proposal=None if text in noise else open_)
    both = (PHONE, DESKTOP)
    return {
        reverse("console-alarms"): (["drift", "snapshots"], both),
        reverse("console-schedules"): (["schedules"], both),
        reverse("console-experiment", args=[experiment.pk]): (["metrics", "offline"], both),
        reverse("labeling-run", args=[run.pk]): (["closed", "unassigned"], both),
        reverse("labeling-runs"): (["discovery-jobs", "runs"], (PHONE, SMALL_LAPTOP, DESKTOP)),
    }


def test_the_tables_with_rows_fit_their_cards_on_a_phone_and_a_laptop(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    seed_demo_world()  # three experts with teams, a promoted clustering run
    Job.objects.create(kind="cluster_queries", title="Cluster the imported questions", status="running", progress=0.35,
                       message="Embedding 4,812 questions from the help-desk export", params={"team": None})
    expected = seed_tables()
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/")
    too_wide = {}
    for path, (tables, sizes) in expected.items():
        for size in sizes:
            page.set_viewport_size(size)
            response = page.goto(f"{base}{path}")
            assert response.status < 400, (path, response.status)
            if page.locator("details#statistics").count():  # an experiment's figures sit behind its Statistics toggle
                page.click("#statistics summary")
            overflow = dict(page.evaluate(TABLE_OVERFLOW))
            assert sorted(overflow) == tables, (path, size["width"])
            wide = {table: px for table, px in overflow.items() if px > 1}
            if page.evaluate("document.documentElement.scrollWidth") > size["width"] + 1:
                wide["page"] = page.evaluate("document.documentElement.scrollWidth") - size["width"]
            if wide:
                too_wide[(path, size["width"])] = wide
                shot(page, f"tables-{size['width']}-" + path.strip("/").replace("/", "-"))
            if size is DESKTOP:  # a laptop still gets the plain table, its header row showing
                assert page.locator(".table-wrap thead th").first.is_visible(), path
    assert too_wide == {}
