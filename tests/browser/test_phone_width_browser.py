"""Every console page at a phone's width (390 px): nothing makes the page itself scroll sideways.

Wide tables scroll inside their own box (``.table-wrap``); forms, ids and long words wrap. The tables a domain
team reads on a phone (the Overview's, the Traces list's, the jobs list's, the experiments', Discovery's runs and
latest jobs, the knowledge list's, an expert's documents, versions and knowledge jobs) do not even scroll in their
box: each row stacks into a block with its column's label before each value.
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from experts.models import Expert, ExpertVersion
from jobs.models import Job
from knowledge.models import Document
from routing.experiments.models import Experiment
from routing.models import RoutingEvent

from .accounts import PASSWORD, log_in
from .demo_world import seed_demo_world, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 1000}
# Each table-wrap's id (its table's) with how far its table overflows it; a table that fits reads 0.
TABLE_OVERFLOW = """[...document.querySelectorAll('.table-wrap')].map(w => [
    w.querySelector('table').id || w.closest('section').id || 'table', w.scrollWidth - w.clientWidth])"""


def pages() -> list[str]:
    """The console's pages: every nav item's, and the detail and form pages they lead to."""
    expert = Expert.objects.get(slug="dmv")
    # Real names are long: the demo's documents and experts widened the knowledge page and the playground's mode list.
    Expert.objects.filter(slug="ssa").update(name="Social Security Administration: retirement, disability and survivors")
    Document.objects.create(expert=expert, external_id="long", content_hash="long", text="…", chunk_count=4,
                            title="Appeal A Decision | Social Security Administration | What To Do If You Disagree With Our Decision")
    # An answer made of two experts' parts: the traces list and its trace page name both, the long name above among them.
    RoutingEvent.objects.create(request_id="chatcmpl-both", mode="auto", router_version=1, expert="dmv", question="Renew my licence and start my pension?",
                                experts=[{"slug": "dmv", "score": 0.5}, {"slug": "ssa", "score": 0.45}], trace={"experts_answering": ["dmv", "ssa"]})
    job = Job.objects.create(kind="train_router", title="Train router", status="succeeded", progress=1.0)
    experiment = Experiment.objects.create(name="Prompt wording", expert=expert, kind="expert", target="expert:dmv", salt="phone",
                                           control_version=1, treatment_version=2)
    names = ["console-overview", "console-playground", "console-traces", "console-heatmap", "console-review", "console-training",
             "labeling-runs", "knowledge-list", "console-jobs", "console-experiments", "console-schedules", "console-alarms", "console-keys",
             "console-audit"]
    urls = [reverse(name) for name in names]
    urls += [reverse("console-expert", args=["dmv"]), reverse("knowledge-expert", args=["dmv"]), reverse("console-job", args=[job.pk]),
             reverse("console-trace", args=["chatcmpl-misroute"]), reverse("console-trace", args=["chatcmpl-both"]),
             reverse("console-experiment", args=[experiment.pk]),
             reverse("expert-adapters", args=["dmv"])]
    return urls


def test_no_console_page_scrolls_sideways_on_a_phone(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    seed_demo_world()
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/")
    page.set_viewport_size(PHONE)
    too_wide = {}
    for path in pages():
        response = page.goto(f"{base}{path}")
        assert response.status < 400, (path, response.status)
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > PHONE["width"] + 1:
            too_wide[path] = width
            shot(page, "phone-" + (path.strip("/").replace("/", "-") or "overview"))
    assert too_wide == {}


def test_the_console_tables_fit_a_phone_without_sideways_scrolling(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    seed_demo_world()  # a promoted clustering run, three documents on each expert
    pages()  # the long expert name and document title, the two-expert answer, an experiment
    Job.objects.create(kind="train_router", title="Train router v2", status="running", progress=0.4, message="Embedding 1,200 labelled questions")
    # The Latest jobs of Discovery and of an expert's knowledge base: at 390 px they overflowed their cards by 39 and 63 px.
    Job.objects.create(kind="cluster_queries", title="Cluster the imported questions", status="running", progress=0.35,
                       message="Embedding 4,812 questions from the help-desk export", params={"team": None})
    Job.objects.create(kind="index_documents", title="Index documents for Motor Vehicles", status="succeeded", progress=1.0,
                       message="Indexed 3 documents (12 chunks)", params={"expert": "dmv"})
    # The router's second choice answered, in an experiment's arm: the row's two badges.
    RoutingEvent.objects.create(request_id="chatcmpl-second", mode="auto", router_version=1, expert="ssa", arm="treatment",
                                question="I moved house last month: who do I tell first, and do I need to update my licence and my pension both?",
                                experts=[{"slug": "dmv", "score": 0.48}, {"slug": "ssa", "score": 0.46}])
    # An expert's versions, one with an adapter on a base model: at 1280 px they overflowed their half-width card.
    dmv = Expert.objects.get(slug="dmv")
    ExpertVersion.objects.create(expert=dmv, version=1, status="retired", system_prompt="Answer briefly.")
    ExpertVersion.objects.create(expert=dmv, version=2, status="active", base_model="meta-llama/Llama-3.1-8B-Instruct", adapter_path="/adapters/dmv-v2",
                                 system_prompt="You answer questions about driver licences, vehicle registration and plates, citing the page you quote.")
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/")
    # Each page's tables, and one label its stacked rows must show.
    expected = {reverse("console-overview"): (["experts", "running-jobs"], "Team"), reverse("console-traces"): (["traces"], "Answered by"),
                reverse("console-jobs"): (["jobs"], "Kind"), reverse("console-experiments"): (["experiments"], "A vs B"),
                reverse("labeling-runs"): (["discovery-jobs", "runs"], "Proposals"), reverse("knowledge-list"): (["knowledge-bases"], "Embedding model"),
                reverse("knowledge-expert", args=["dmv"]): (["documents", "kb-jobs"], "Set aside"),
                reverse("console-expert", args=["dmv"]): (["traffic-table", "versions"], "Adapter")}
    for path, (tables, label) in expected.items():
        page.set_viewport_size(PHONE)
        page.goto(f"{base}{path}")
        overflow = dict(page.evaluate(TABLE_OVERFLOW))
        assert sorted(overflow) == tables, path
        if any(px > 1 for px in overflow.values()):
            shot(page, "phone-tables-" + (path.strip("/").replace("/", "-") or "overview"))
        assert {table: px for table, px in overflow.items() if px > 1} == {}, path
        labels = page.evaluate("[...document.querySelectorAll('.table-wrap td')].map(td => getComputedStyle(td, '::before').content)")
        assert f'"{label}"' in labels, path
        if {"discovery-jobs", "kb-jobs"} & set(tables):  # a job's status and progress are labelled too
            assert '"Progress"' in labels, path
        page.set_viewport_size(DESKTOP)  # a laptop still gets the plain table, its header row showing, and it fits its card
        assert page.locator(".table-wrap thead th").first.is_visible(), path
        assert {table: px for table, px in page.evaluate(TABLE_OVERFLOW) if px > 1} == {}, path
    # The heatmap's day of hours fits a laptop's card (its Total column was 29 px past the card's edge at 1280 px); on a
    # phone each expert's hours wrap six to a line (test_heatmap_phone_browser.py).
    page.set_viewport_size(DESKTOP)
    page.goto(f"{base}{reverse('console-heatmap')}")
    overflow = dict(page.evaluate(TABLE_OVERFLOW))
    assert "heatmap" in overflow
    assert overflow["heatmap"] <= 1
