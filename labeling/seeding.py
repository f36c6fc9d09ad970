"""The team's documented experts as discovery's seeds (``labeling.ml.seeding``): which experts, and each question's evidence in them."""

from __future__ import annotations

from typing import Any

import numpy as np
from django.db.models import Max, Q, Sum

from experts.choices import ExpertStatus
from experts.models import Expert
from knowledge.evidence import evidence_lookup

from .choices import RunStatus
from .models import ClusteringRun


def documented_experts(team: Any) -> list[Expert]:
    """The team's active experts (no team: the experts without one) with indexed passages, fallback experts left out, by slug.

    Each carries ``passages`` (its indexed passages) and ``indexed`` (when its documents were last indexed).
    None once the team has promoted a run: its experts came from its questions, and a new run (the monthly
    re-clustering) looks for topics again rather than for the departments it already has.
    """
    if ClusteringRun.objects.filter(status=RunStatus.PROMOTED, team=team).exists():
        return []
    indexed = Q(documents__indexed_at__isnull=False)
    experts = (Expert.objects.filter(status=ExpertStatus.ACTIVE, is_fallback=False)
               .annotate(passages=Sum("documents__chunk_count", filter=indexed), indexed=Max("documents__indexed_at", filter=indexed))
               .filter(passages__gt=0))
    experts = experts.filter(team=team) if team is not None else experts.filter(team__isnull=True)
    return list(experts.order_by("slug"))


def question_evidence(experts: list[Expert], texts: list[str], vectors: np.ndarray) -> np.ndarray:
    """(questions, experts): each question's best dense cosine in each expert's collection, NaN where it has none."""
    lookup = evidence_lookup([e.slug for e in experts])
    positions = list(range(len(experts)))
    out = np.full((len(texts), len(experts)), np.nan)
    for i, (text, vector) in enumerate(zip(texts, vectors, strict=True)):
        for j, found in enumerate(lookup(positions, vector, text)):
            if found is not None:
                out[i, j] = found[0]
    return out
