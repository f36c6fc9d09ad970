"""The expert page for its team: description, versions, knowledge, traffic, recent questions, misroutes; access rules."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from experts.models import Expert, ExpertVersion
from knowledge.models import Document
from labeling.models import ReviewDecision
from routing.models import Feedback, RouterVersion, RoutingEvent
from tests.factories import make_expert, make_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def world(django_user_model):
    roads, pensions = make_team("roads"), make_team("pensions")
    dmv = make_expert("dmv", "Motor Vehicles", team=roads, description="Licences, plates and registrations.", public=False)
    ssa = make_expert("ssa", "Social Security", team=pensions, public=False)
    member = django_user_model.objects.create_user("rita", "rita@example.com", "pw-rita-1234")
    member.groups.add(roads)
    return dmv, ssa, member


def test_the_page_shows_description_team_versions_knowledge_and_traffic(client, world):
    dmv, _ssa, member = world
    ExpertVersion.objects.create(expert=dmv, version=1, status="active", adapter_path="/adapters/dmv-v1", base_model="tiny", system_prompt="You answer DMV questions.")
    Document.objects.create(expert=dmv, external_id="a", title="Renewals", content_hash="x", text="a", chunk_count=4)
    RouterVersion.objects.create(version=3, path="/x", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint="f", is_active=True)
    RoutingEvent.objects.create(request_id="r1", mode="auto", expert="dmv", question="How do I renew my licence?")
    old = RoutingEvent.objects.create(request_id="r2", mode="auto", expert="dmv", question_chars=30)
    RoutingEvent.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=2))
    client.force_login(member)

    response = client.get(reverse("console-expert", args=["dmv"]))

    assert response.status_code == 200
    body = response.content.decode()
    assert "Licences, plates and registrations." in body
    assert "team roads" in body
    assert "dmv-v1" in body
    assert "routable by v3" in body
    assert "1 document" in body
    assert "4 chunks" in body
    assert 'action="/knowledge/dmv/search/"' in body
    assert [n for _, n in [(t["day"], t["n"]) for t in response.context["traffic"]]][-3:] == [1, 0, 1]
    assert response.context["traffic_total"] == 2
    assert [e.request_id for e in response.context["questions"]] == ["r1"]  # r2's text was not stored
    assert "How do I renew my licence?" in body


def test_misroutes_list_thumbs_down_that_name_another_expert_and_reviewed_questions(client, world, staff_user):
    dmv, _ssa, _member = world
    RoutingEvent.objects.create(request_id="bad", mode="auto", expert="dmv", question="When can I claim my pension?")
    Feedback.objects.create(request_id="bad", rating=-1, expert="dmv", comment="wrong agency", suggested_expert="ssa")
    Feedback.objects.create(request_id="good", rating=1, expert="dmv")
    ReviewDecision.objects.create(request_id="moved", reason="low_confidence", routed_expert="ssa", expert=dmv)
    ReviewDecision.objects.create(request_id="agreed", reason="low_confidence", routed_expert="dmv", expert=dmv)
    client.force_login(staff_user)

    reports = client.get(reverse("console-expert", args=["dmv"])).context["reports"]

    assert [(m.request_id, m.kind, m.right_expert) for m in reports.misroutes] == [("moved", "reviewed", "dmv"), ("bad", "thumbs_down", "ssa")]
    bad = reports.misroutes[1]
    assert bad.question == "When can I claim my pension?"
    assert bad.comment == "wrong agency"
    assert reports.unhelpful == []


def test_a_thumbs_down_that_names_no_other_expert_is_an_unhelpful_answer_not_a_misroute(client, world, staff_user):
    dmv, ssa, _member = world
    RoutingEvent.objects.create(request_id="vague", mode="auto", expert="dmv", question="How do I renew my licence?")
    Feedback.objects.create(request_id="vague", rating=-1, expert="dmv", comment="did not answer")
    Feedback.objects.create(request_id="confirmed", rating=-1, expert="dmv", suggested_expert="ssa")
    ReviewDecision.objects.create(request_id="confirmed", reason="thumbs_down", routed_expert="dmv", expert=dmv)  # the reviewer kept dmv
    Feedback.objects.create(request_id="relabelled", rating=-1, expert="dmv")
    ReviewDecision.objects.create(request_id="relabelled", reason="thumbs_down", routed_expert="dmv", expert=ssa)
    client.force_login(staff_user)

    response = client.get(reverse("console-expert", args=["dmv"]))

    reports = response.context["reports"]
    assert [m.request_id for m in reports.misroutes] == ["relabelled"]
    assert sorted(m.request_id for m in reports.unhelpful) == ["confirmed", "vague"]
    body = response.content.decode()
    misroutes_html = body[body.index('id="misroutes"'):body.index('id="unhelpful"')]
    unhelpful_html = body[body.index('id="unhelpful"'):]
    assert "Answers marked unhelpful" in unhelpful_html
    assert "How do I renew my licence?" in unhelpful_html
    assert "How do I renew my licence?" not in misroutes_html


def test_another_teams_expert_is_a_404_and_shows_nothing(client, world):
    _dmv, _ssa, member = world
    client.force_login(member)

    response = client.get(reverse("console-expert", args=["ssa"]))

    assert response.status_code == 404
    assert "Social Security" not in response.content.decode()


def test_a_deleted_expert_gives_a_friendly_404(client, world, staff_user):
    dmv, _ssa, _member = world
    client.force_login(staff_user)
    url = reverse("console-expert", args=["dmv"])
    dmv.delete()

    response = client.get(url)

    assert response.status_code == 404
    assert 'id="not-found"' in response.content.decode()


def test_the_adapters_link_appears_only_when_that_page_exists(client, world, staff_user, monkeypatch):
    from console import expert

    client.force_login(staff_user)
    monkeypatch.setattr(expert, "optional_url", lambda name, *args: "")
    assert 'id="adapters-link"' not in client.get(reverse("console-expert", args=["dmv"])).content.decode()
    monkeypatch.setattr(expert, "optional_url", lambda name, *args: f"/experts/{args[0]}/adapters/" if name == "expert-adapters" else "")
    assert 'href="/experts/dmv/adapters/"' in client.get(reverse("console-expert", args=["dmv"])).content.decode()


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", "pw-admin-1234", is_staff=True)


def test_staff_choose_the_fallback_expert_from_its_page_and_others_may_not(client, django_user_model):
    from audit.models import AuditEntry
    from experts.selectors import fallback_slugs

    make_expert("general", "General help", status="active", public=False)
    staff = django_user_model.objects.create_user("ops", "ops@example.com", "pw-ops-12345", is_staff=True)
    member = django_user_model.objects.create_user("kim", "kim@example.com", "pw-kim-12345")
    client.force_login(member)
    assert client.post(reverse("console-expert-fallback", args=["general"]), {"fallback": "on"}).status_code == 403
    client.force_login(staff)
    page = client.get(reverse("console-expert", args=["general"])).content.decode()
    assert "Let General help answer those" in page
    done = client.post(reverse("console-expert-fallback", args=["general"]), {"fallback": "on"}, follow=True)
    assert "now answers the questions no expert is sure about" in done.content.decode()
    assert Expert.objects.get(slug="general").is_fallback
    assert fallback_slugs() == ("general",)  # serving sees it at once in this process
    assert AuditEntry.objects.filter(action="expert.fallback").exists()
    client.post(reverse("console-expert-fallback", args=["general"]), {"fallback": "off"})
    assert not Expert.objects.get(slug="general").is_fallback
