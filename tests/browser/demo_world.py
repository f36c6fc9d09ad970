"""The demo walk's world for the browser tests (not a test module): three team-owned experts with a week of
traffic, a misrouted question, a router and labelled questions; and where the walk's screenshots go."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from knowledge.models import Document
from labeling.models import Assignment, ClusteringRun, Proposal, Query
from routing.models import Feedback, RouterVersion, RoutingEvent
from sbcommon.hashing import text_hash
from tests.factories import make_expert, make_team

SCREENSHOTS = Path(os.environ.get("SCREENSHOT_DIR") or Path(settings.BASE_DIR) / "var" / "test-artifacts" / "screenshots")
MISROUTED = "When can I start drawing my retirement pension?"

QUESTIONS = {
    "dmv": ["renew my driver license online", "replace a lost driving licence", "register a new car", "book a road test appointment",
            "change the address on my license", "get a learner permit", "transfer a vehicle title", "order new licence plates"],
    "ssa": ["apply for retirement benefits", "replace my social security card", "check my benefit payment date", "report a change of address to social security",
            "apply for disability benefits", "get a benefit verification letter", "survivor benefits for a spouse", "when do retirement benefits start"],
    "va": ["apply for veterans health care", "file a disability compensation claim", "use the GI bill for college", "find a VA medical center",
           "veteran pension eligibility", "request military service records", "VA home loan certificate", "burial benefits for veterans"],
}


def seed_demo_world() -> None:
    """Three team-owned experts, a week of traffic, a misrouted low-confidence question with a thumbs-down,
    an active router, and a promoted clustering run with labelled questions to train the next router on."""
    roads, benefits = make_team("roads"), make_team("benefits")
    experts = {
        "dmv": make_expert("dmv", "Motor Vehicles", team=roads, description="Driver licences, vehicle registration and plates.", public=False),
        "ssa": make_expert("ssa", "Social Security", team=benefits, description="Retirement, disability and survivor benefits.", public=False),
        "va": make_expert("va", "Veterans Affairs", team=benefits, description="Health care, pensions and education for veterans.", public=False),
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


def shot(page, name: str) -> None:
    """A full-page screenshot named ``name`` in SCREENSHOTS."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
