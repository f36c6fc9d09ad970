"""The traffic heatmap: login required, counts per expert and bucket, shares against the fair share, the alarm."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from console.heatmap import Heatmap, HeatRow, traffic_heatmap
from routing.models import RoutingEvent
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


@pytest.fixture
def experts():
    make_expert("dmv", "Motor Vehicles", public=False)
    make_expert("ssa", "Social Security", public=False)
    make_expert("va", "Veterans Affairs", status="disabled", public=False)


def event(slug: str, at: datetime) -> RoutingEvent:
    e = RoutingEvent.objects.create(request_id=f"r-{RoutingEvent.objects.count()}", mode="auto", expert=slug, experts=[{"slug": slug or "dmv", "score": 0.9}], abstained=not slug)
    RoutingEvent.objects.filter(pk=e.pk).update(created_at=at)
    return e


def row(heatmap: Heatmap, slug: str) -> HeatRow:
    return next(r for r in heatmap.rows if r.slug == slug)


def test_anonymous_users_are_sent_to_the_login_page(client):
    response = client.get(reverse("console-heatmap"))
    assert response.status_code == 302
    assert response["Location"] == f"{reverse('login')}?next=/heatmap/"


def test_it_counts_requests_in_the_right_hour_cells(experts):
    now = timezone.now().replace(minute=30, second=0, microsecond=0)
    for hours_ago in (0, 2, 2, 5):
        event("dmv", now - timedelta(hours=hours_ago))
    event("ssa", now - timedelta(hours=2, minutes=20))
    event("ssa", now - timedelta(hours=30))  # outside the window

    heatmap = traffic_heatmap("24h", now=now)

    assert len(heatmap.buckets) == 24
    assert heatmap.buckets[-1] == now.replace(minute=0)
    assert [c.count for c in row(heatmap, "dmv").cells][-6:] == [1, 0, 0, 2, 0, 1]
    assert [c.count for c in row(heatmap, "ssa").cells][-6:] == [0, 0, 0, 1, 0, 0]
    assert sum(c.count for c in row(heatmap, "ssa").cells) == 1
    assert row(heatmap, "dmv").cells[-3].intensity == 1.0
    assert row(heatmap, "dmv").cells[-1].intensity == 0.5
    assert heatmap.total == 5


def test_the_page_shows_each_count_as_text_in_its_cell(console, experts):
    now = timezone.now()
    event("dmv", now - timedelta(hours=3))
    event("dmv", now - timedelta(hours=3))
    event("dmv", now)

    response = console.get(reverse("console-heatmap"))

    assert response.status_code == 200
    cells = [c.count for c in row(response.context["heatmap"], "dmv").cells]
    assert sorted(c for c in cells if c) == [1, 2]  # positions are checked against a fixed clock above
    html = response.content.decode()
    # The count links to its traces; its cell is labelled with its hour (what a phone shows above the count).
    assert re.search(r'<td class="num heat hot" style="--heat: 1.00" data-label="\d\d:00"><a href="/traces/\?expert=dmv&amp;since=', html)
    assert 'title="the traces of these requests">2</a></td>' in html
    assert re.search(r'<td class="num heat" style="--heat: 0.50" data-label="\d\d:00"><a href=', html)
    assert 'title="the traces of these requests">1</a></td>' in html
    assert "Motor Vehicles" in html
    assert "Social Security" in html
    assert "Veterans Affairs" not in html  # disabled and silent: no row


def test_shares_are_measured_against_the_fair_share_with_the_load_cv(experts):
    now = timezone.now()
    for _ in range(3):
        event("dmv", now)
    event("ssa", now)
    event("", now)  # an abstention: counted apart, not in anyone's share

    heatmap = traffic_heatmap("24h", now=now)

    assert heatmap.fair_share == 0.5
    assert row(heatmap, "dmv").share == 0.75
    assert row(heatmap, "ssa").share == 0.25
    assert heatmap.load_cv == pytest.approx(0.5)
    assert heatmap.abstained == 1
    assert heatmap.total == 4


def test_an_expert_over_the_alarm_share_gets_a_text_badge(console, experts, settings):
    settings.LOAD_ALARM_MIN_REQUESTS = 1  # a handful of requests: let the share alarm fire
    now = timezone.now()
    for _ in range(6):
        event("dmv", now)
    for _ in range(4):
        event("ssa", now)

    response = console.get(reverse("console-heatmap"))

    html = response.content.decode()
    assert html.count("over threshold") == 1
    assert 'id="alarm"' in html
    dmv_row = html.split('<tr data-expert="dmv" class="over">')[1].split("</tr>")[0]
    assert "over threshold" in dmv_row
    assert "60.0%" in dmv_row


def test_the_alarm_share_comes_from_settings(console, experts, settings):
    settings.ROUTER_ALARM_SHARE = 0.7
    for _ in range(6):
        event("dmv", timezone.now())
    for _ in range(4):
        event("ssa", timezone.now())

    html = console.get(reverse("console-heatmap")).content.decode()

    assert "over threshold" not in html
    assert 'id="alarm"' not in html


def test_a_disabled_expert_that_answered_still_gets_a_row_but_not_a_fair_share(experts):
    event("va", timezone.now())

    heatmap = traffic_heatmap("24h")

    assert [r.slug for r in heatmap.rows] == ["dmv", "ssa", "va"]
    assert row(heatmap, "va").active is False
    assert heatmap.fair_share == 0.5


@pytest.mark.parametrize(("window", "buckets", "counted"), [("24h", 24, 1), ("7d", 7, 2), ("30d", 30, 3), ("bogus", 24, 1)])
def test_the_window_sets_the_buckets_and_what_is_counted(console, experts, window, buckets, counted):
    now = timezone.now()
    event("dmv", now)
    event("dmv", now - timedelta(days=3))
    event("dmv", now - timedelta(days=20))
    event("dmv", now - timedelta(days=45))

    response = console.get(reverse("console-heatmap"), {"window": window})

    heatmap = response.context["heatmap"]
    assert len(heatmap.buckets) == buckets
    assert heatmap.total == counted
    assert heatmap.window == (window if window != "bogus" else "24h")


def test_day_windows_bucket_by_local_day(experts):
    now = timezone.now().replace(hour=12, minute=0, second=0, microsecond=0)
    event("dmv", now - timedelta(days=1, hours=11))
    event("dmv", now - timedelta(days=1, hours=-11))

    heatmap = traffic_heatmap("7d", now=now)

    assert heatmap.buckets[-1] == now.replace(hour=0)
    assert [c.count for c in row(heatmap, "dmv").cells][-2:] == [2, 0]


def test_it_shows_an_empty_state_without_traffic(console, experts):
    response = console.get(reverse("console-heatmap"), {"window": "7d"})

    html = response.content.decode()
    assert 'id="heatmap-empty"' in html
    assert 'id="heatmap"' not in html
    assert "No routed requests in this window." in html


def test_the_share_chart_data_is_json_behind_the_login(client, owner, experts, settings):
    settings.LOAD_ALARM_MIN_REQUESTS = 1
    now = timezone.now()
    for _ in range(6):
        event("dmv", now)
    for _ in range(4):
        event("ssa", now)
    url = reverse("console-heatmap-data") + "?window=24h"

    assert client.get(url).status_code == 302
    client.force_login(owner)
    response = client.get(url)

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    data = response.json()
    shares = {e["slug"]: e for e in data["experts"]}
    assert shares["dmv"]["share"] == pytest.approx(0.6)
    assert shares["dmv"]["over_threshold"] is True
    assert shares["ssa"]["over_threshold"] is False
    assert data["fair_share"] == pytest.approx(0.5)
    assert data["total"] == 10


def test_the_page_draws_the_share_chart_with_the_vendored_library(console, experts):
    event("dmv", timezone.now())

    html = console.get(reverse("console-heatmap")).content.decode()

    assert 'src="/static/vendor/chart.umd.min.js"' in html
    assert 'data-chart="share"' in html
    assert "<canvas" in html.split('id="share-chart"')[1].split("</figure>")[0]
    assert 'class="muted small chart-fallback"' in html  # the no-JS text
    assert 'id="shares"' in html  # the table view
    assert "cdn" not in html.lower()
