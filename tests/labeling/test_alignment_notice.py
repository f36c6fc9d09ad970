"""Proposals aligned to known labels (the demo's scripted review) say so on the run page, with how many queries moved."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling.choices import ReviewActionKind
from labeling.models import Assignment, Query
from labeling.proposals import align_with_labels

pytestmark = pytest.mark.django_db


def _label(run, prefix: str, label: str) -> None:
    Query.objects.filter(assignments__run=run, text__startswith=prefix).update(label=label)


def test_aligning_records_how_many_queries_it_moved(three_topics):
    _label(three_topics, "renew", "dmv")
    _label(three_topics, "passport", "state")
    _label(three_topics, "state pension", "state")
    _label(three_topics, "close to", "dmv")
    _label(three_topics, "far from", "state")

    align_with_labels(three_topics)

    action = three_topics.actions.get(action=ReviewActionKind.ALIGN)
    assert action.details["moved_queries"] == 2  # the two unassigned queries; the pensions moved with their merged proposal
    assert action.details["queries"] == 14
    assert action.details["labels"] == 2
    assert "2 queries moved" in action.summary
    assert Assignment.objects.filter(run=three_topics, proposal__isnull=True).count() == 0


def test_the_run_page_says_the_proposals_were_aligned_to_the_labels(console, three_topics):
    url = reverse("labeling-run", args=[three_topics.pk])
    assert 'id="alignment-notice"' not in console.get(url).content.decode()
    _label(three_topics, "renew", "dmv")
    _label(three_topics, "close to", "state")

    align_with_labels(three_topics)

    html = console.get(url).content.decode()
    notice = html[html.index('id="alignment-notice"'):]
    notice = notice[: notice.index("</div>")]
    assert "aligned to the known labels" in notice
    assert "by a scripted review (the demo)" in notice
    assert '<strong id="alignment-moved">1</strong>' in notice
    assert "not what discovery found" in notice
