"""A run's header tells its real state, after an htmx action too (the header is part of the block each action re-renders)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from labeling.proposals import promote_proposal

from .conftest import proposal

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def test_finishing_the_review_by_htmx_answers_with_the_header_saying_promoted(console, owner, three_topics):
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])

    body = console.post(reverse("labeling-finish", args=[three_topics.pk]), headers=HTMX).content.decode()

    assert '<span class="badge run-promoted" id="run-status">Promoted</span>' in body
    assert "In review" not in body
    assert 'id="discard-run-button"' not in body


def test_a_run_with_some_proposals_promoted_is_still_in_review_and_says_how_many(console, three_topics, team):
    promote_proposal(proposal(three_topics, "Licences"), "Licences", team=team)

    body = console.get(reverse("labeling-run", args=[three_topics.pk])).content.decode()

    assert '<span class="badge run-draft" id="run-status">In review</span>' in body
    assert '<span class="muted small" id="run-promoted-so-far">1 promoted so far</span>' in body
