"""Reads of labeling state: cached embeddings, what a reviewer sees of a clustering run, and the
training set a promoted run defines."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from django.core.paginator import Page, Paginator
from django.db.models import Case, Count, F, Q, QuerySet, When

from experts.access import user_teams
from jobs.choices import ACTIVE_STATUSES
from jobs.models import Job
from jobs.services import JobFailed

from .access import team_ids, visible_runs
from .choices import OPEN_STATUSES, UNDOABLE_ACTIONS, ProposalStatus, ReviewActionKind, RunStatus
from .ml.radius import normalise
from .models import Assignment, ClusteringRun, Embedding, Proposal, Query, ReviewAction
from .seeding import documented_experts

# Bind-parameter lists stay under PostgreSQL's 65,535 and SQLite's compiled limits.
ID_CHUNK = 10_000
QUERIES_PER_PAGE = 25
DISCOVERY_JOB_KINDS = ("import_queries", "embed_queries", "cluster_queries", "discover")


@dataclass
class LabelledQuery:
    """A query with the expert it was assigned to."""

    query_id: int
    text: str
    expert: str
    split: str
    conversation: str


def chunks(items: list[Any], size: int = ID_CHUNK) -> Iterable[list[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def load_embeddings(query_ids: list[int], model: str) -> np.ndarray:
    """Cached embeddings for these queries, in order (raises ``JobFailed`` if any is missing)."""
    hashes: dict[int, str] = {}
    for part in chunks(list(query_ids)):
        hashes.update(Query.objects.filter(pk__in=part).values_list("pk", "text_hash"))
    vectors: dict[str, np.ndarray] = {}
    for part in chunks(sorted(set(hashes.values()))):
        for h, v in Embedding.objects.filter(model=model, text_hash__in=part).values_list("text_hash", "vector"):
            vectors[h] = np.frombuffer(bytes(v), dtype="<f4")
    missing = [pk for pk in query_ids if hashes.get(pk) not in vectors]
    if missing:
        raise JobFailed(f"{len(missing)} queries have no embedding for {model}; run the embedding job first")
    if not query_ids:
        return np.zeros((0, 0), dtype=np.float32)
    return np.stack([vectors[hashes[pk]] for pk in query_ids]).astype(np.float32)


def centroid_of(proposal: Proposal) -> np.ndarray | None:
    """A proposal's normalised centroid, if it has been computed."""
    return None if proposal.centroid is None else np.frombuffer(bytes(proposal.centroid), dtype="<f4")


def _runs_by_expert() -> dict[int, int]:
    """Each promoted expert's id → the id of the newest promoted run that promoted it."""
    latest: dict[int, int] = {}
    proposals = (Proposal.objects.filter(status=ProposalStatus.PROMOTED, expert__isnull=False, run__status=RunStatus.PROMOTED)
                 .order_by("-run__created_at", "-run_id").values_list("expert_id", "run_id"))
    for expert_id, run_id in proposals:
        latest.setdefault(expert_id, run_id)
    return latest


def latest_promoted_runs() -> list[ClusteringRun]:
    """The promoted runs the router learns from, newest first: for each expert, the newest run that promoted it.

    Runs belong to teams, and each team reviews and promotes its own: team A's newer run must not
    hide team B's experts from the router, nor a staff run's older labels outvote a team's newer review.
    """
    ids = set(_runs_by_expert().values())
    return list(ClusteringRun.objects.filter(pk__in=ids).order_by("-created_at", "-pk"))


def promoted_run_of(expert: Any) -> ClusteringRun | None:
    """Where a review label for ``expert`` goes: the newest promoted run that promoted it, else the newest
    promoted run of its team (``None``: of no team); None when there is neither."""
    run_id = _runs_by_expert().get(expert.pk)
    if run_id is not None:
        return ClusteringRun.objects.filter(pk=run_id).first()
    return ClusteringRun.objects.filter(status=RunStatus.PROMOTED, team_id=expert.team_id).order_by("-created_at", "-pk").first()


def routing_examples(runs: ClusteringRun | Iterable[ClusteringRun]) -> list[LabelledQuery]:
    """Every query in a promoted proposal, with that proposal's expert: of one run, or of several runs given newest
    first (``latest_promoted_runs``), each expert's queries from the first of them that promoted it."""
    runs = [runs] if isinstance(runs, ClusteringRun) else list(runs)
    rank = {run.pk: i for i, run in enumerate(runs)}
    rows = list(
        Assignment.objects.filter(run__in=runs, proposal__status=ProposalStatus.PROMOTED, proposal__expert__isnull=False)
        .select_related("query", "proposal__expert")
        .order_by("query_id")
    )
    newest: dict[int, int] = {}
    for a in rows:
        newest[a.proposal.expert_id] = min(newest.get(a.proposal.expert_id, len(runs)), rank[a.run_id])
    return [
        LabelledQuery(query_id=a.query_id, text=a.query.text, expert=a.proposal.expert.slug, split=a.query.split, conversation=a.query.conversation)
        for a in rows if rank[a.run_id] == newest[a.proposal.expert_id]
    ]


# --- the review console ---------------------------------------------------------------------------

@dataclass
class ProposalRow:
    """An open proposal as the review page shows it."""

    proposal: Proposal
    share: float
    nearest: Proposal | None = None
    nearest_similarity: float | None = None
    elsewhere: int = 0  # its questions whose best-matching documents are another expert's (runs seeded by documents)

    @property
    def share_percent(self) -> float:
        return round(100 * self.share, 1)


@dataclass
class UnassignedQuery:
    """A query in no proposal, with the open proposal it is closest to."""

    query_id: int
    text: str
    nearest: Proposal | None = None
    distance: float | None = None


@dataclass
class RunReview:
    """Everything the review page of one clustering run shows."""

    run: ClusteringRun
    rows: list[ProposalRow]
    closed: list[Proposal]
    unassigned: Page
    unassigned_queries: list[UnassignedQuery]
    noise_in_proposals: int
    actions: list[ReviewAction]
    undoable: ReviewAction | None
    promoted: int
    alignment: ReviewAction | None = None  # the align-with-labels action, when the proposals were rewritten to known labels

    @property
    def editable_proposals(self) -> list[Proposal]:
        return [row.proposal for row in self.rows if row.proposal.status == ProposalStatus.PROPOSED]


def runs(user: Any) -> QuerySet[ClusteringRun]:
    """The clustering runs ``user`` may see (``access.visible_runs``) but the discarded ones, newest first, with how many proposals are open."""
    return visible_runs(user).exclude(status=RunStatus.DISCARDED).select_related("team").annotate(
        open_count=Count("proposals", filter=Q(proposals__status__in=OPEN_STATUSES)),
        promoted_count=Count("proposals", filter=Q(proposals__status=ProposalStatus.PROMOTED)),
    ).order_by("-created_at", "-pk")


def editable_proposals(run: ClusteringRun) -> QuerySet[Proposal]:
    """The run's proposals a reviewer can still change (not promoted, merged, split or discarded), largest first."""
    return run.proposals.filter(status=ProposalStatus.PROPOSED).order_by("-size", "index")


def team_queries(team: Any) -> QuerySet[Query]:
    """The queries a run of ``team`` clusters: the team's imports (``None``: the staff-only ones with no team)."""
    return Query.objects.filter(team=team)


def teams_with_queries(at_least: int = 1) -> list[Any]:
    """The teams (``None``: staff-only queries) holding at least ``at_least`` imported queries, for the monthly re-clustering."""
    from django.contrib.auth.models import Group

    counts = Query.objects.values("team").annotate(n=Count("id")).filter(n__gte=at_least)
    ids = [row["team"] for row in counts]
    groups = {g.pk: g for g in Group.objects.filter(pk__in=[i for i in ids if i is not None])}
    return [groups.get(i) if i is not None else None for i in ids if i is None or i in groups]


def documented_departments(user: Any) -> list[Any]:
    """The experts with documents that would seed a discovery run of ``user``'s team (staff: the team-less ones)."""
    if user.is_staff:
        return documented_experts(None)
    teams = list(user_teams(user)[:2])
    return documented_experts(teams[0]) if len(teams) == 1 else []


def _seen_by(queries: QuerySet[Query], user: Any) -> QuerySet[Query]:
    ids = team_ids(user)
    return queries if ids is None else queries.filter(team_id__in=ids)


def query_count(user: Any) -> int:
    """How many imported queries ``user`` may cluster (staff: all; a member: their teams')."""
    return _seen_by(Query.objects.all(), user).count()


def sources(user: Any) -> list[tuple[int | None, str, int]]:
    """(team id, source, queries) of the sources ``user`` may cluster, largest first.

    A source is a name within a team: two teams' sources of the same name are two rows.
    """
    rows = _seen_by(Query.objects.all(), user).values_list("team_id", "source").annotate(n=Count("id")).order_by("-n", "source", "team_id")
    return [(team_id, source, n) for team_id, source, n in rows]


def discovery_jobs(user: Any, limit: int = 5) -> list[Job]:
    """Recent import and discovery jobs of the teams ``user`` is in (staff: all), active ones first.

    A job's team is its ``params["team"]`` (a group id, or ``None`` for staff-only work).
    """
    jobs = Job.objects.filter(kind__in=DISCOVERY_JOB_KINDS)
    ids = team_ids(user)
    if ids is not None:
        jobs = jobs.filter(params__team__in=ids) if ids else jobs.none()
    recent = list(jobs.order_by("-created_at", "-id")[:limit])
    return sorted(recent, key=lambda job: job.status not in ACTIVE_STATUSES)


def undoable_action(run: ClusteringRun) -> ReviewAction | None:
    """The action an undo would undo: the latest not undone, if it can be undone."""
    latest = run.actions.filter(undone=False).order_by("-created_at", "-id").first()
    if latest is None or latest.action not in UNDOABLE_ACTIONS or run.status == RunStatus.PROMOTED:
        return None
    return latest


def _nearest_others(proposals: list[Proposal]) -> dict[int, tuple[Proposal, float]]:
    """For each proposal with a centroid, the other one whose centroid is most similar."""
    with_centroid = [(p, c) for p in proposals if (c := centroid_of(p)) is not None]
    if len(with_centroid) < 2:
        return {}
    cents = np.stack([c for _, c in with_centroid])
    sims = cents @ cents.T
    np.fill_diagonal(sims, -np.inf)
    best = sims.argmax(axis=1)
    return {p.pk: (with_centroid[int(b)][0], float(sims[i, b])) for i, ((p, _), b) in enumerate(zip(with_centroid, best, strict=True))}


def unassigned_page(run: ClusteringRun, page: int | str = 1) -> Page:
    """One page of the run's queries that sit in no proposal."""
    rows = Assignment.objects.filter(run=run, proposal__isnull=True).select_related("query").order_by("query_id")
    return Paginator(rows, QUERIES_PER_PAGE).get_page(page)


def with_nearest(run: ClusteringRun, assignments: Iterable[Assignment], proposals: list[Proposal]) -> list[UnassignedQuery]:
    """Unassigned queries with their nearest open proposal and its cosine distance."""
    items = list(assignments)
    out = [UnassignedQuery(a.query_id, a.query.text) for a in items]
    candidates = [(p, c) for p in proposals if p.status == ProposalStatus.PROPOSED and (c := centroid_of(p)) is not None]
    if not items or not candidates:
        return out
    try:
        x = normalise(load_embeddings([a.query_id for a in items], run.model))
    except JobFailed:
        return out
    sims = x @ np.stack([c for _, c in candidates]).T
    for row, item in zip(sims, out, strict=True):
        best = int(row.argmax())
        item.nearest, item.distance = candidates[best][0], float(1.0 - row[best])
    return out


def run_review(run: ClusteringRun, unassigned_page_number: int | str = 1, action_limit: int = 30) -> RunReview:
    """What the review page of ``run`` shows: open proposals with their share, cohesion and nearest
    neighbour, closed ones, unassigned queries, and the action history."""
    proposals = list(run.proposals.select_related("expert", "expert__team", "merged_into").order_by("index"))
    open_ = [p for p in proposals if p.status in OPEN_STATUSES]
    nearest = _nearest_others(open_)
    total = run.n_queries or 1
    elsewhere = dict(pointing_elsewhere(run).values_list("proposal").annotate(n=Count("pk")).values_list("proposal", "n"))
    rows = [
        ProposalRow(p, share=p.size / total, nearest=nearest.get(p.pk, (None, None))[0], nearest_similarity=nearest.get(p.pk, (None, None))[1],
                    elsewhere=elsewhere.get(p.pk, 0))
        for p in sorted(open_, key=lambda p: (-p.size, p.index))
    ]
    page = unassigned_page(run, unassigned_page_number)
    return RunReview(
        run=run,
        rows=rows,
        closed=[p for p in proposals if p.status not in OPEN_STATUSES],
        unassigned=page,
        unassigned_queries=with_nearest(run, page.object_list, open_),
        noise_in_proposals=Assignment.objects.filter(run=run, topic=-1, proposal__status=ProposalStatus.PROPOSED).count(),
        actions=list(run.actions.select_related("user")[:action_limit]),
        undoable=undoable_action(run),
        promoted=sum(1 for p in open_ if p.status == ProposalStatus.PROMOTED),
        alignment=run.actions.filter(action=ReviewActionKind.ALIGN, undone=False).first(),
    )


# ``Assignment.points_elsewhere`` in SQL: the documents name an expert, and the proposal has none or another.
_POINTS_ELSEWHERE = Q(documents_point_to__isnull=False) & (Q(proposal__expert__isnull=True) | ~Q(documents_point_to=F("proposal__expert")))


def pointing_elsewhere(run: ClusteringRun) -> QuerySet[Assignment]:
    """The run's questions whose best-matching documents belong to another expert than their proposal's."""
    return Assignment.objects.filter(_POINTS_ELSEWHERE, run=run, proposal__isnull=False)


def proposal_queries(proposal: Proposal, page: int | str = 1) -> Page:
    """One page of a proposal's queries, those whose documents point to another expert first."""
    elsewhere = Case(When(_POINTS_ELSEWHERE, then=0), default=1)
    rows = (Assignment.objects.filter(proposal=proposal).select_related("query", "proposal", "documents_point_to")
            .order_by(elsewhere, "query_id"))
    return Paginator(rows, QUERIES_PER_PAGE).get_page(page)
