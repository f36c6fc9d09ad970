"""Discovery review: renaming, merging, splitting, discarding and promoting expert proposals.

The edits a domain team makes to a clustering run's proposals before promoting them to experts.
Changes are recorded as ``ReviewAction`` rows holding what it takes to undo them; ``undo_last``
walks them back one at a time, up to the first promotion.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

import numpy as np
from django.db import transaction
from django.utils import timezone

from experts import services as expert_services
from jobs.services import JobFailed

from .choices import OPEN_STATUSES, ProposalStatus, ReviewActionKind, RunStatus
from .ml.grouping import describe_groups, group_topics
from .ml.radius import normalise
from .models import Assignment, ClusteringRun, Proposal, ReviewAction
from .selectors import centroid_of, chunks, load_embeddings, undoable_action


def group_stats(x: np.ndarray) -> tuple[bytes | None, float | None]:
    """Normalised centroid (as bytes) and cohesion (mean cosine of members to it) of some embeddings."""
    if x.size == 0:
        return None, None
    x = normalise(x)
    centroid = x.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm == 0:
        return None, None
    centroid = (centroid / norm).astype("<f4")
    return centroid.tobytes(), float(np.mean(x @ centroid))


class ReviewError(ValueError):
    """A review action that cannot be done, with a message for the reviewer."""


class ReviewConflict(ReviewError):
    """A review action the run's or proposal's state forbids now (promoted, merged, nothing left): a 409 in the API."""


def _record(run: ClusteringRun, action: str, user: Any, summary: str, details: dict[str, Any] | None = None, undo: dict[str, Any] | None = None) -> ReviewAction:
    return ReviewAction.objects.create(
        run=run, user=user if getattr(user, "is_authenticated", False) else None, action=action, summary=summary[:255],
        details=details or {}, undo_state=undo or {},
    )


def _lock(run: ClusteringRun) -> ClusteringRun:
    """The run's row, locked for this transaction: reviewers acting at once queue instead of interleaving."""
    locked = ClusteringRun.objects.select_for_update().get(pk=run.pk)
    if locked.status == RunStatus.PROMOTED:
        raise ReviewConflict("this run has been promoted; start a new clustering run to change it")
    if locked.status == RunStatus.DISCARDED:
        raise ReviewConflict("this run was discarded; start a new clustering run")
    return locked


def _editable(proposal: Proposal) -> None:
    if proposal.status == ProposalStatus.PROMOTED:
        raise ReviewConflict(f"'{proposal.name}' is promoted to an expert and can no longer change")
    if proposal.status != ProposalStatus.PROPOSED:
        raise ReviewConflict(f"'{proposal.name}' is {proposal.get_status_display().lower()}")


def _refresh(proposal: Proposal) -> None:
    """Recompute a proposal's size, centroid and cohesion from its queries' cached embeddings."""
    ids = list(Assignment.objects.filter(proposal=proposal).order_by("query_id").values_list("query_id", flat=True))
    proposal.size = len(ids)
    try:
        proposal.centroid, proposal.cohesion = group_stats(load_embeddings(ids, proposal.run.model)) if ids else (None, None)
    except JobFailed:
        proposal.centroid, proposal.cohesion = None, None  # embeddings gone (another model): stats unknown, not wrong
    proposal.save(update_fields=["size", "centroid", "cohesion"])


def _refresh_ids(ids: Iterable[int | None]) -> None:
    for proposal in Proposal.objects.filter(pk__in={i for i in ids if i is not None}).select_related("run"):
        _refresh(proposal)


def ensure_proposal_stats(run: ClusteringRun) -> None:
    """Fill in centroid and cohesion for proposals that lack them (runs made before they were kept)."""
    for proposal in run.proposals.filter(status__in=OPEN_STATUSES, centroid__isnull=True, size__gt=0).select_related("run"):
        _refresh(proposal)


def next_index(run: ClusteringRun) -> int:
    last = run.proposals.order_by("-index").values_list("index", flat=True).first()
    return 0 if last is None else last + 1


def _do_rename(proposal: Proposal, name: str) -> str:
    old, new = proposal.name, " ".join(name.split())[:128]
    if not new:
        raise ReviewError("a proposal needs a name")
    proposal.name = new
    proposal.save(update_fields=["name"])
    return old


def _do_merge(target: Proposal, others: list[Proposal]) -> list[dict[str, Any]]:
    undo = []
    for other in others:
        moved = list(Assignment.objects.filter(proposal=other).values_list("pk", flat=True))
        undo.append({"id": other.pk, "status": other.status, "assignments": moved})
        Assignment.objects.filter(proposal=other).update(proposal=target)
        other.status, other.merged_into, other.size = ProposalStatus.MERGED, target, 0
        other.save(update_fields=["status", "merged_into", "size"])
    _refresh(target)
    return undo


def _do_discard(proposal: Proposal) -> str:
    old = proposal.status
    proposal.status = ProposalStatus.DISCARDED
    proposal.save(update_fields=["status"])
    return old


@transaction.atomic
def rename_proposal(proposal: Proposal, name: str, user: Any = None) -> Proposal:
    """Give a proposal a new name (whitespace collapsed, at most 128 characters)."""
    _lock(proposal.run)
    _editable(proposal)
    old = _do_rename(proposal, name)
    _record(proposal.run, ReviewActionKind.RENAME, user, f"Renamed '{old}' to '{proposal.name}'",
            {"proposal": proposal.pk, "old": old, "new": proposal.name}, {"proposal": proposal.pk, "old": old})
    return proposal


@transaction.atomic
def merge_proposals(target: Proposal, others: list[Proposal], user: Any = None) -> Proposal:
    """Move the queries of ``others`` into ``target`` and mark them merged."""
    _lock(target.run)
    others = [o for o in others if o.pk != target.pk and o.run_id == target.run_id]
    if not others:
        raise ReviewError("choose at least two proposals to merge")
    for proposal in [target, *others]:
        _editable(proposal)
    names = [o.name for o in others]
    undo = _do_merge(target, others)
    _record(target.run, ReviewActionKind.MERGE, user, f"Merged {', '.join(repr(n) for n in names)} into '{target.name}'",
            {"target": target.pk, "merged": [o.pk for o in others], "names": names}, {"target": target.pk, "others": undo})
    return target


def merge_chosen(run: ClusteringRun, ids: Iterable[int], target_id: int | None = None, user: Any = None) -> tuple[Proposal, int]:
    """Merge the run's proposals ``ids`` into ``target_id`` (default: the largest of them); returns the target and how many merged.

    Raises:
        ReviewError: fewer than two of the run's proposals chosen, or one cannot change.
    """
    chosen = list(run.proposals.filter(pk__in={*ids, *([target_id] if target_id else [])}))
    if len(chosen) < 2:
        raise ReviewError("choose at least two proposals of this run to merge")
    target = next((p for p in chosen if p.pk == target_id), None) or max(chosen, key=lambda p: (p.size, -p.index))
    merge_proposals(target, [p for p in chosen if p.pk != target.pk], user=user)
    return target, len(chosen)


def proposal_of(run: ClusteringRun, pk: int | None) -> Proposal | None:
    """The run's proposal ``pk`` (``None`` for none: unassigned); ReviewError when the run has no such proposal."""
    if pk is None:
        return None
    proposal = run.proposals.filter(pk=pk).first()
    if proposal is None:
        raise ReviewError(f"this run has no proposal {pk}")
    return proposal


@transaction.atomic
def discard_proposal(proposal: Proposal, user: Any = None) -> Proposal:
    """Mark a proposal discarded: it becomes no expert, and its queries train no router."""
    _lock(proposal.run)
    _editable(proposal)
    old = _do_discard(proposal)
    _record(proposal.run, ReviewActionKind.DISCARD, user, f"Discarded '{proposal.name}'", {"proposal": proposal.pk},
            {"proposal": proposal.pk, "status": old})
    return proposal


def _split_groups(x: np.ndarray, topics: np.ndarray, k: int) -> np.ndarray:
    """Sub-group labels 0..k-1: by the members' DBSCAN topics when there are enough, else KMeans."""
    if len({int(t) for t in topics if t != -1}) >= k:
        groups = group_topics(x, topics, k)
    else:
        from sklearn.cluster import KMeans

        groups = KMeans(n_clusters=k, n_init=10, random_state=0).fit_predict(normalise(x))
    _, dense = np.unique(groups, return_inverse=True)
    return dense.reshape(-1)


@transaction.atomic
def split_proposal(proposal: Proposal, k: int, user: Any = None) -> list[Proposal]:
    """Recluster one proposal's queries into ``k`` new proposals (from cached embeddings).

    The proposal is marked split; the new ones get keywords and representative queries of their own.
    """
    run = _lock(proposal.run)
    _editable(proposal)
    members = list(Assignment.objects.filter(proposal=proposal).order_by("query_id").values_list("pk", "query_id", "topic", "query__text"))
    if k < 2:
        raise ReviewError("split into at least two proposals")
    if len(members) < 2 * k:
        raise ReviewError(f"'{proposal.name}' has {len(members)} queries: too few to split into {k}")
    x = load_embeddings([m[1] for m in members], run.model)
    groups = _split_groups(x, np.array([m[2] for m in members]), k)
    texts = [m[3] for m in members]
    children = []
    index = next_index(run)
    for summary in describe_groups(texts, x, groups):
        name = " / ".join(summary.keywords[:3]) or f"{proposal.name} {summary.label + 1}"
        centroid, cohesion = group_stats(x[groups == summary.label])
        child = Proposal.objects.create(
            run=run, index=index, name=name[:128], keywords=summary.keywords, representatives=[texts[j] for j in summary.representatives],
            size=summary.size, centroid=centroid, cohesion=cohesion,
        )
        index += 1
        mine = [members[j][0] for j in np.nonzero(groups == summary.label)[0]]
        for part in chunks(mine):
            Assignment.objects.filter(pk__in=part).update(proposal=child)
        children.append(child)
    old = proposal.status
    proposal.status, proposal.size = ProposalStatus.SPLIT, 0
    proposal.save(update_fields=["status", "size"])
    _record(run, ReviewActionKind.SPLIT, user, f"Split '{proposal.name}' into {len(children)}: " + ", ".join(repr(c.name) for c in children),
            {"proposal": proposal.pk, "children": [c.pk for c in children], "k": k},
            {"proposal": proposal.pk, "status": old, "children": [c.pk for c in children]})
    return children


def _reassign(run: ClusteringRun, assignments: list[tuple[int, int | None]], target: Proposal | None) -> dict[str, list[int]]:
    """Point these (assignment id, current proposal id) rows at ``target``; returns the undo map by previous proposal."""
    previous: dict[str, list[int]] = defaultdict(list)
    for pk, proposal_id in assignments:
        if proposal_id != (target.pk if target else None):
            previous[str(proposal_id) if proposal_id is not None else "none"].append(pk)
    moved = [pk for pks in previous.values() for pk in pks]
    for part in chunks(moved):
        Assignment.objects.filter(run=run, pk__in=part).update(proposal=target)
    _refresh_ids([*(None if key == "none" else int(key) for key in previous), target.pk if target else None])
    return dict(previous)


MATCHING_MAX_CHARS = 200  # a search a reviewer types, not a pasted document


def matching_queries(run: ClusteringRun, text: str, source: Proposal | None = None) -> list[int]:
    """Ids of the run's queries whose text holds every word of ``text`` (any case), in ``source`` (None: anywhere in the run).

    Raises:
        ReviewError: ``text`` has no word, or is longer than ``MATCHING_MAX_CHARS``.
    """
    words = text.split()
    if not words or len(text) > MATCHING_MAX_CHARS:
        raise ReviewError(f"type one to {MATCHING_MAX_CHARS} characters of words the queries to move contain")
    rows = Assignment.objects.filter(run=run).exclude(proposal__status=ProposalStatus.PROMOTED)  # those can no longer move
    if source is not None:
        rows = rows.filter(proposal=source)
    for word in words:
        rows = rows.filter(query__text__icontains=word)
    return list(rows.values_list("query_id", flat=True))


def move_matching(run: ClusteringRun, text: str, target: Proposal | None, source: Proposal | None = None, user: Any = None) -> int:
    """Move every query of the run holding all the words of ``text`` (from ``source`` only, when given) to ``target``:
    a mixed proposal fixed in one step ("all the questions about garbage go to Government"). Undone like any move."""
    ids = matching_queries(run, text, source)
    if not ids:
        where = f" in '{source.name}'" if source is not None else ""
        raise ReviewError(f"no query{where} holds every word of {text.strip()!r}")
    return move_queries(run, ids, target, user=user, matching=text.strip())


@transaction.atomic
def move_queries(run: ClusteringRun, query_ids: list[int], target: Proposal | None, user: Any = None, matching: str = "") -> int:
    """Move queries of a run to another proposal (``None``: leave them unassigned); returns how many moved.
    ``matching``: the words that chose them (``move_matching``), for the review's history."""
    run = _lock(run)
    if target is not None:
        if target.run_id != run.pk:
            raise ReviewError("that proposal belongs to another run")
        _editable(target)
    rows = list(Assignment.objects.filter(run=run, query_id__in=query_ids).values_list("pk", "proposal_id", "proposal__status"))
    if not rows:
        raise ReviewError("choose at least one query to move")
    if any(status == ProposalStatus.PROMOTED for _, _, status in rows):
        raise ReviewConflict("queries of a promoted proposal can no longer move")
    previous = _reassign(run, [(pk, pid) for pk, pid, _ in rows], target)
    count = sum(len(v) for v in previous.values())
    where = f"'{target.name}'" if target else "unassigned"
    chosen = f" matching '{matching}'" if matching else ""
    _record(run, ReviewActionKind.MOVE, user, f"Moved {count} {'query' if count == 1 else 'queries'}{chosen} to {where}",
            {"queries": list(query_ids)[:100], "target": target.pk if target else None, **({"matching": matching} if matching else {})},
            {"previous": previous})
    return count


@transaction.atomic
def detach_noise(run: ClusteringRun, user: Any = None) -> int:
    """Take every noise query (DBSCAN topic -1) out of its proposal, to attach only the close ones back."""
    run = _lock(run)
    rows = list(Assignment.objects.filter(run=run, topic=-1, proposal__status=ProposalStatus.PROPOSED).values_list("pk", "proposal_id"))
    if not rows:
        raise ReviewConflict("no noise query sits in an open proposal")
    previous = _reassign(run, rows, None)
    count = sum(len(v) for v in previous.values())
    _record(run, ReviewActionKind.DETACH_NOISE, user, f"Detached {count} noise queries from their proposals", {"count": count}, {"previous": previous})
    return count


@transaction.atomic
def attach_noise(run: ClusteringRun, max_distance: float, user: Any = None) -> int:
    """Attach unassigned queries to their nearest open proposal when within ``max_distance`` (cosine).

    Returns how many were attached; the others stay unassigned.
    """
    run = _lock(run)
    ensure_proposal_stats(run)
    proposals = [p for p in run.proposals.filter(status=ProposalStatus.PROPOSED).order_by("index") if p.centroid is not None]
    if not proposals:
        raise ReviewConflict("there is no open proposal to attach queries to")
    rows = list(Assignment.objects.filter(run=run, proposal__isnull=True).order_by("query_id").values_list("pk", "query_id"))
    if not rows:
        raise ReviewConflict("no query is unassigned")
    centroids = np.stack([centroid_of(p) for p in proposals])
    previous: dict[str, list[int]] = defaultdict(list)
    chosen: dict[int, list[int]] = defaultdict(list)
    for part in chunks(rows):
        sims = normalise(load_embeddings([q for _, q in part], run.model)) @ centroids.T
        best = sims.argmax(axis=1)
        close = (1.0 - sims[np.arange(len(part)), best]) <= max_distance
        for (pk, _), b, ok in zip(part, best, close, strict=True):
            if ok:
                chosen[proposals[int(b)].pk].append(pk)
                previous["none"].append(pk)
    for proposal_id, pks in chosen.items():
        for part in chunks(pks):
            Assignment.objects.filter(pk__in=part).update(proposal_id=proposal_id)
    _refresh_ids(chosen)
    count = len(previous["none"])
    _record(run, ReviewActionKind.ATTACH_NOISE, user, f"Attached {count} of {len(rows)} unassigned queries within distance {max_distance:.2f}",
            {"count": count, "max_distance": max_distance, "per_proposal": {str(k): len(v) for k, v in chosen.items()}}, {"previous": dict(previous)})
    return count


def _undo_moves(previous: dict[str, list[int]]) -> None:
    touched: set[int | None] = set()
    for key, pks in previous.items():
        proposal_id = None if key == "none" else int(key)
        for part in chunks(pks):
            touched.update(Assignment.objects.filter(pk__in=part).values_list("proposal_id", flat=True).distinct())
            Assignment.objects.filter(pk__in=part).update(proposal_id=proposal_id)
        touched.add(proposal_id)
    _refresh_ids(touched)


@transaction.atomic
def undo_last(run: ClusteringRun, user: Any = None) -> ReviewAction:
    """Undo the run's latest review action (rename, merge, split, discard, move, detach or attach noise).

    Raises:
        ReviewError: nothing to undo, or the latest action is a promotion (which ends undo).
    """
    run = _lock(run)
    action = undoable_action(run)
    if action is None:
        latest = run.actions.filter(undone=False).first()
        if latest is None:
            raise ReviewConflict("there is nothing to undo")
        raise ReviewConflict(f"'{latest.summary}' cannot be undone, nor anything before it")
    state = action.undo_state
    if action.action == ReviewActionKind.RENAME:
        Proposal.objects.filter(pk=state["proposal"]).update(name=state["old"])
    elif action.action == ReviewActionKind.DISCARD:
        Proposal.objects.filter(pk=state["proposal"]).update(status=state["status"])
    elif action.action == ReviewActionKind.MERGE:
        for other in state["others"]:
            for part in chunks(other["assignments"]):
                Assignment.objects.filter(pk__in=part).update(proposal_id=other["id"])
            Proposal.objects.filter(pk=other["id"]).update(status=other["status"], merged_into=None)
        _refresh_ids([state["target"], *(o["id"] for o in state["others"])])
    elif action.action == ReviewActionKind.SPLIT:
        Assignment.objects.filter(proposal_id__in=state["children"]).update(proposal_id=state["proposal"])
        Proposal.objects.filter(pk__in=state["children"]).delete()
        Proposal.objects.filter(pk=state["proposal"]).update(status=state["status"])
        _refresh_ids([state["proposal"]])
    else:  # move, detach_noise, attach_noise
        _undo_moves(state["previous"])
    action.undone, action.undone_at, action.undone_by = True, timezone.now(), user if getattr(user, "is_authenticated", False) else None
    action.save(update_fields=["undone", "undone_at", "undone_by"])
    return action


@transaction.atomic
def align_with_labels(run: ClusteringRun, user: Any = None) -> list[str]:
    """Review by known labels: one proposal per label, every labelled query under its own label.

    Proposals whose majority label is the same are merged; a label without a proposal gets one;
    queries are moved to their label's proposal; proposals are renamed after their label. Returns
    what was done, in words, so a scripted review can say so. Recorded as one action, which cannot
    be undone, with how many queries it moved (``details["moved_queries"]``): the run page shows it,
    since experts aligned this way are the labels, not what discovery found.
    """
    run = _lock(run)
    actions: list[str] = []
    assignments = list(Assignment.objects.filter(run=run).select_related("query", "proposal"))
    majority: dict[int, Counter[str]] = {}
    for a in assignments:
        if a.proposal_id and a.query.label:
            majority.setdefault(a.proposal_id, Counter())[a.query.label] += 1
    by_label: dict[str, list[Proposal]] = {}
    for proposal in run.proposals.filter(status=ProposalStatus.PROPOSED):
        counts = majority.get(proposal.pk)
        if not counts:
            _do_discard(proposal)
            actions.append(f"discarded '{proposal.name}' (no labelled queries)")
            continue
        label, hits = counts.most_common(1)[0]
        by_label.setdefault(label, []).append(proposal)
        purity = hits / sum(counts.values())
        actions.append(f"'{proposal.name}' is mostly {label} ({purity:.0%} of its labelled queries)")
    labels = sorted({a.query.label for a in assignments if a.query.label})
    target_for: dict[str, Proposal] = {}
    free_index = next_index(run)
    for label in labels:
        group = sorted(by_label.get(label, []), key=lambda p: -p.size)
        if group:
            target = group[0]
            if len(group) > 1:
                _do_merge(target, group[1:])
                actions.append(f"merged {len(group)} proposals into one for {label}")
        else:
            target = Proposal.objects.create(run=run, index=free_index, name=label, keywords=[], size=0)
            free_index += 1
            actions.append(f"created a proposal for {label} (the clustering found none)")
        target_for[label] = target
    moved: dict[int, list[int]] = defaultdict(list)
    current = dict(Assignment.objects.filter(run=run).values_list("pk", "proposal_id"))
    for a in assignments:
        wanted = target_for.get(a.query.label)
        if wanted is not None and current.get(a.pk) != wanted.pk:
            moved[wanted.pk].append(a.pk)
    for proposal_id, pks in moved.items():
        for part in chunks(pks):
            Assignment.objects.filter(pk__in=part).update(proposal_id=proposal_id)
    n_moved = sum(len(v) for v in moved.values())
    if moved:
        actions.append(f"relabelled {n_moved} queries to their known domain")
    for label, target in target_for.items():
        if target.name != label:
            _do_rename(target, label)
    _refresh_ids([t.pk for t in target_for.values()] + [pid for pid in set(current.values()) if pid is not None])
    # How much of the result is the labels' rather than the discovery's: the run page says so.
    _record(run, ReviewActionKind.ALIGN, user, f"Aligned with known labels ({len(labels)} labels, {n_moved} queries moved)",
            {"summary": actions, "moved_queries": n_moved, "queries": len(assignments), "labels": len(labels)})
    return actions


def _promote(proposal: Proposal, name: str, description: str, team: Any, seed_queries: list[str] | None) -> Any:
    slug = proposal.expert.slug if proposal.expert else expert_services.slug_for(name)
    expert, _ = expert_services.upsert_expert(slug, name, description=description, keywords=proposal.keywords, team=team)
    if team is not None and expert.team_id != team.pk:  # an existing expert promoted again goes to the team promoting it
        expert.team = team
        expert.save(update_fields=["team"])
    proposal.name = name[:128]
    proposal.expert, proposal.status = expert, ProposalStatus.PROMOTED
    proposal.seed_queries = list(seed_queries if seed_queries is not None else proposal.representatives)
    proposal.save(update_fields=["name", "expert", "status", "seed_queries"])
    return expert


def default_description(proposal: Proposal) -> str:
    if proposal.expert is not None and proposal.expert.description:  # a run seeded by the expert's documents keeps its words
        return proposal.expert.description
    return f"Discovered from {proposal.size} queries: " + "; ".join(proposal.representatives[:3])


@transaction.atomic
def promote_proposal(
    proposal: Proposal, name: str, description: str = "", team: Any = None, seed_queries: list[str] | None = None, user: Any = None,
) -> Any:
    """Make one proposal an expert (created, or updated when one has this name's slug).

    Args:
        proposal: an open proposal.
        name: the expert's name.
        description: what the expert knows (default: from its size and representative queries).
        team: the auth ``Group`` that owns the expert. A run with a team promotes into that team
            (the default; another one is refused); a run without one (staff-only) into ``team``, if any.
        seed_queries: example queries kept with the proposal (default: its representatives).
        user: who did it.

    Returns the expert. Promotion ends undo: neither it nor anything before it can be undone.
    """
    run = _lock(proposal.run)
    _editable(proposal)
    if run.team_id is not None:
        if team is not None and team.pk != run.team_id:
            raise ReviewError(f"experts promoted from this run belong to its team, {run.team.name}")
        team = run.team
    name = " ".join(name.split())[:128]
    if not name:
        raise ReviewError("the expert needs a name")
    expert = _promote(proposal, name, description.strip() or default_description(proposal), team, seed_queries)
    _record(run, ReviewActionKind.PROMOTE, user, f"Promoted '{name}' to expert '{expert.slug}'" + (f" owned by {team.name}" if team else ""),
            {"proposal": proposal.pk, "expert": expert.pk, "slug": expert.slug, "team": team.pk if team else None, "seed_queries": proposal.seed_queries})
    return expert


@transaction.atomic
def promote_run(run: ClusteringRun, user: Any = None) -> list[Any]:
    """Turn every reviewed proposal into an expert of the run's team (if it has one) and mark the run promoted (idempotent)."""
    experts = []
    if not run.proposals.filter(status__in=OPEN_STATUSES).exists():
        raise ReviewConflict("no proposal is left to promote; undo a discard, or start a new clustering run")
    for proposal in run.proposals.filter(status__in=OPEN_STATUSES).select_related("expert").order_by("index"):
        if proposal.status == ProposalStatus.PROMOTED and proposal.expert is not None:
            experts.append(proposal.expert)  # promoted by hand: keep the name, description and team chosen then
            continue
        experts.append(_promote(proposal, proposal.name, default_description(proposal), run.team, None))
    if run.status != RunStatus.PROMOTED:
        run.status = RunStatus.PROMOTED
        run.save(update_fields=["status"])
        _record(run, ReviewActionKind.FINISH, user, f"Finished the review: {len(experts)} experts", {"experts": [e.slug for e in experts]})
    return experts

