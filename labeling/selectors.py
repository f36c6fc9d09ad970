"""Reads of labeling state: the training set a promoted clustering run defines."""

from __future__ import annotations

from dataclasses import dataclass

from .choices import ProposalStatus, RunStatus
from .models import Assignment, ClusteringRun


@dataclass
class LabelledQuery:
    """A query with the expert it was assigned to."""

    query_id: int
    text: str
    expert: str
    split: str
    conversation: str


def latest_promoted_run() -> ClusteringRun | None:
    return ClusteringRun.objects.filter(status=RunStatus.PROMOTED).order_by("-created_at", "-pk").first()


def routing_examples(run: ClusteringRun) -> list[LabelledQuery]:
    """Every query of the run that sits in a promoted proposal, with that proposal's expert."""
    rows = (
        Assignment.objects.filter(run=run, proposal__status=ProposalStatus.PROMOTED, proposal__expert__isnull=False)
        .select_related("query", "proposal__expert")
        .order_by("query_id")
    )
    return [
        LabelledQuery(query_id=a.query_id, text=a.query.text, expert=a.proposal.expert.slug, split=a.query.split, conversation=a.query.conversation)
        for a in rows
    ]
