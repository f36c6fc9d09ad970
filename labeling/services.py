"""Importing query logs, embedding them, clustering them and reviewing expert proposals.

Every write of the labeling app goes through here. Review changes are recorded as ``ReviewAction``
rows holding what it takes to undo them; ``undo_last`` walks them back one at a time, up to the
first promotion.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from experts import services as expert_services
from experts.ml.clustering import SparseDBSCAN, describe_groups, group_topics, propose_experts, suggest_n_groups
from jobs.models import Job
from jobs.services import JobFailed, JobReporter, enqueue_once
from sbcommon import uploads
from sbcommon.encoders import get_encoder
from sbcommon.hashing import text_hash

from .choices import OPEN_STATUSES, ProposalStatus, ReviewActionKind, RunStatus
from .importers import SNIFF_BYTES, Row, RowError, UnreadableFile, detect_format, iter_rows, sniff
from .models import Assignment, ClusteringRun, Embedding, Proposal, Query, ReviewAction, ReviewDecision
from .selectors import centroid_of, chunks, latest_promoted_run, load_embeddings, normalise, undoable_action

logger = logging.getLogger(__name__)
IMPORT_BATCH = 2000
MAX_REPORTED_ERRORS = 200
DEFAULT_IMPORT_MAX_BYTES = 2 * 1024**3


# --- import ---------------------------------------------------------------------------------------

class ImportRejected(JobFailed):
    """The file cannot be imported at all; nothing was written."""


class UploadRejected(ValueError):
    """An uploaded file refused before it is stored, with the HTTP status that says why."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class ImportReport:
    """What an import did: rows read, imported, skipped as duplicates, rejected lines and failed batches."""

    rows: int = 0
    imported: int = 0
    duplicates: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    error_count: int = 0
    failed_batches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed_rows(self) -> int:
        return sum(b["rows"] for b in self.failed_batches)

    def as_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows, "imported": self.imported, "duplicates": self.duplicates, "error_count": self.error_count,
            "errors": self.errors, "failed_rows": self.failed_rows, "failed_batches": self.failed_batches,
        }


def max_import_bytes() -> int:
    """The largest query log accepted for import (setting ``QUERY_IMPORT_MAX_BYTES``, default 2 GiB)."""
    return int(getattr(settings, "QUERY_IMPORT_MAX_BYTES", DEFAULT_IMPORT_MAX_BYTES))


def default_source(name: str) -> str:
    """The source label a file gets when none is given: its name without folders and extension."""
    stem = Path(name).name.split(".")[0]
    return re.sub(r"[^\w.-]+", "-", stem).strip("-")[:128] or "upload"


def _row_hash(row: Row, source: str) -> str:
    key = json.dumps([source, row.text, row.timestamp.isoformat() if row.timestamp else "", row.user, row.conversation, row.label])
    return hashlib.sha256(key.encode()).hexdigest()


def _flush(batch: list[tuple[int, Query]], report: ImportReport) -> None:
    """Store one batch in one transaction; a database error rolls back this batch only and is reported."""
    if not batch:
        return
    queries = [q for _, q in batch]
    try:
        with transaction.atomic():
            existing = set(Query.objects.filter(row_hash__in=[q.row_hash for q in queries]).values_list("row_hash", flat=True))
            fresh = {q.row_hash: q for q in queries if q.row_hash not in existing}  # also drops repeats inside the batch
            Query.objects.bulk_create(list(fresh.values()), ignore_conflicts=True)
    except DatabaseError as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else exc.__class__.__name__
        report.failed_batches.append({"first_line": batch[0][0], "last_line": batch[-1][0], "rows": len(batch), "reason": reason})
        logger.warning("labeling.import.batch_failed", extra={"first_line": batch[0][0], "last_line": batch[-1][0]})
    else:
        report.imported += len(fresh)
        report.duplicates += len(batch) - len(fresh)
    batch.clear()


def _head(stream: IO[bytes]) -> tuple[IO[bytes], bytes]:
    if stream.seekable():
        position = stream.tell()
        head = stream.read(SNIFF_BYTES)
        stream.seek(position)
        return stream, head
    buffered = io.BufferedReader(stream, buffer_size=SNIFF_BYTES)  # type: ignore[arg-type]
    return buffered, buffered.peek(SNIFF_BYTES)[:SNIFF_BYTES]


def import_queries(stream: IO[bytes], name: str, source: str, redact: bool = False, reporter: JobReporter | None = None, total_bytes: int | None = None) -> ImportReport:
    """Import a CSV/TSV/JSONL query log, streamed, one transaction per batch; reruns import nothing twice.

    A row is identified by the hash of its content (source, text, timestamp, user, conversation,
    label), so a rerun, or a row repeated in the file, counts as a duplicate. Rejected rows are
    reported with their line numbers; a batch the database refuses is rolled back alone and reported
    by its line range, and a rerun imports it without duplicating the rest.

    Args:
        stream: binary file object.
        name: file name (for the format).
        source: label for where the queries came from.
        redact: replace e-mail addresses and phone numbers before storing.
        reporter: progress sink.
        total_bytes: file size, for progress.

    Raises:
        ImportRejected: the file is empty, not UTF-8, a CSV without a text column, or not JSON Lines.
    """
    reporter = reporter or JobReporter()
    stream, head = _head(stream)
    complete = len(head) < SNIFF_BYTES or (total_bytes is not None and len(head) >= total_bytes)
    try:
        sniff(head, name, complete=complete)
    except UnreadableFile as exc:
        raise ImportRejected(str(exc)) from exc
    fmt = detect_format(name, head)
    report = ImportReport()
    batch: list[tuple[int, Query]] = []
    for item in iter_rows(stream, fmt, do_redact=redact):
        if isinstance(item, RowError):
            report.error_count += 1
            if len(report.errors) < MAX_REPORTED_ERRORS:
                report.errors.append({"line": item.line, "reason": item.reason})
            continue
        report.rows += 1
        batch.append((item.line, Query(
            text=item.text, text_hash=text_hash(item.text), row_hash=_row_hash(item, source), source=source,
            label=item.label, user=item.user, conversation=item.conversation, timestamp=item.timestamp, split=item.split,
        )))
        if len(batch) >= IMPORT_BATCH:
            _flush(batch, report)
            if total_bytes:
                try:
                    reporter.progress(min(0.99, stream.tell() / total_bytes), f"{report.rows} rows read, {report.imported} imported")
                except (OSError, ValueError):
                    pass
    _flush(batch, report)
    reporter.progress(1.0, f"{report.rows} rows read, {report.imported} imported")
    return report


def check_upload(upload: Any) -> str:
    """Validate an uploaded query log before anything is stored; returns its format.

    Raises:
        UploadRejected: too large (413), empty, not UTF-8, a CSV without a text column, not JSON Lines (400).
    """
    limit = max_import_bytes()
    if upload.size > limit:
        raise UploadRejected(f"the file is {upload.size:,} bytes; the limit is {limit:,} bytes", status=413)
    if upload.size == 0:
        raise UploadRejected("the file is empty")
    upload.seek(0)
    head = upload.read(SNIFF_BYTES)
    upload.seek(0)
    try:
        return sniff(head, upload.name, complete=len(head) >= upload.size).fmt
    except UnreadableFile as exc:
        raise UploadRejected(str(exc)) from exc


def upload_dir() -> Path:
    return Path(settings.VAR_DIR) / "uploads"


def save_upload(upload: Any) -> tuple[Path, str]:
    """Store an upload under ``VAR_DIR/uploads/`` atomically; returns (path, SHA-256)."""
    return uploads.save_upload(upload, upload_dir(), default_name="queries")


def accept_upload(upload: Any, source: str = "", redact: bool = False, user: Any = None) -> Job:
    """Validate, store and enqueue an uploaded query log; the same file twice gives the same active job.

    Raises:
        UploadRejected: see ``check_upload``.
    """
    from . import tasks  # tasks import this module

    check_upload(upload)
    path, digest = save_upload(upload)
    source = source.strip()[:128] or default_source(upload.name)
    job = enqueue_once(
        "import_queries", f"import_queries:{digest}:{int(bool(redact))}:{source}"[:255], f"Import {Path(upload.name).name[:200]}", tasks.import_queries,
        {"path": str(path), "name": upload.name, "source": source, "redact": bool(redact), "sha256": digest, "uploaded": True}, user,
    )
    if job.params.get("path") != str(path):
        path.unlink(missing_ok=True)  # the same file is already being imported
    return job


# --- embeddings and clustering --------------------------------------------------------------------

def embed_missing(model: str | None = None, source: str | None = None, reporter: JobReporter | None = None) -> dict[str, int]:
    """Embed every query text that has no cached embedding for ``model`` yet (resumable)."""
    reporter = reporter or JobReporter()
    model = model or settings.EMBEDDING_MODEL
    queries = Query.objects.all()
    if source:
        queries = queries.filter(source=source)
    wanted = dict(queries.values_list("text_hash", "text").distinct())
    cached: set[str] = set()
    for part in chunks(list(wanted)):
        cached.update(Embedding.objects.filter(model=model, text_hash__in=part).values_list("text_hash", flat=True))
    todo = [(h, t) for h, t in wanted.items() if h not in cached]
    if todo:  # loading the encoder costs seconds: only when there is work
        encoder = get_encoder(model, settings.TORCH_THREADS)
    step = 512
    for start in range(0, len(todo), step):
        part = todo[start : start + step]
        vectors = encoder.encode([t for _, t in part], batch_size=settings.EMBEDDING_BATCH_SIZE)
        Embedding.objects.bulk_create(
            [Embedding(model=model, text_hash=h, vector=v.astype("<f4").tobytes()) for (h, _), v in zip(part, vectors, strict=True)],
            ignore_conflicts=True,
        )
        reporter.progress((start + len(part)) / len(todo), f"embedded {start + len(part)}/{len(todo)} texts")
    return {"texts": len(wanted), "embedded": len(todo), "cached": len(wanted) - len(todo)}


def _group_stats(x: np.ndarray) -> tuple[bytes | None, float | None]:
    """Normalised centroid (as bytes) and cohesion (mean cosine of members to it) of some embeddings."""
    if x.size == 0:
        return None, None
    x = normalise(x.astype(np.float32))
    centroid = x.mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if norm == 0:
        return None, None
    centroid = (centroid / norm).astype("<f4")
    return centroid.tobytes(), float(np.mean(x @ centroid))


def cluster_queries(
    source: str = "", eps: float | None = None, min_samples: int = 5, n_experts: int | None = None,
    reporter: JobReporter | None = None, attach_noise: bool = True,
) -> ClusteringRun:
    """Cluster the (embedded) queries into topics and group them into expert proposals.

    Same inputs and parameters as an earlier run → that run is returned, nothing is recomputed.

    Args:
        source: only queries from this source ("" for all).
        eps: DBSCAN radius in cosine distance (``None``: suggested from the data).
        min_samples: DBSCAN's core-point threshold.
        n_experts: proposals to group the topics into (``None``: suggested).
        reporter: progress sink.
        attach_noise: join noise queries to their nearest proposal; when false they stay unassigned
            for the reviewer to attach (``attach_noise``) or leave out.
    """
    reporter = reporter or JobReporter()
    model = settings.EMBEDDING_MODEL
    queries = Query.objects.all().order_by("pk")
    if source:
        queries = queries.filter(source=source)
    rows = list(queries.values_list("pk", "text"))
    if len(rows) < max(10, min_samples * 2):
        raise JobFailed(f"only {len(rows)} queries to cluster; import at least {max(10, min_samples * 2)}")
    ids = [pk for pk, _ in rows]
    key: list[Any] = [source, model, eps, min_samples, n_experts, len(ids), ids[-1]]
    if not attach_noise:
        key.append("noise-unassigned")  # appended only when set, so earlier runs keep their fingerprints
    fingerprint = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    existing = ClusteringRun.objects.filter(fingerprint=fingerprint).first()
    if existing is not None:
        return existing
    x = load_embeddings(ids, model)
    reporter.progress(0.2, "clustering")
    # Exact DBSCAN on the full embeddings: the blockwise pair search is fast enough at 100k, and a PCA
    # reduction at the same eps changes the clusters (ARI 0.51 against exact at 20k).
    estimator = SparseDBSCAN(eps=eps, min_samples=min_samples).fit(x)
    labels = estimator.labels_
    reporter.progress(0.6, f"{estimator.n_clusters_} topics; grouping into experts")
    k = n_experts or suggest_n_groups(x, labels)
    if attach_noise:
        # Grouped from the radius that groups best (what `manage.py evaluate clustering` measures).
        groups, _radius = propose_experts(x, estimator, k)
    else:
        groups = group_topics(x, labels, k, assign_noise=False)
    summaries = describe_groups([t for _, t in rows], x, groups)
    reporter.progress(0.8, f"{len(summaries)} proposals; saving")
    with transaction.atomic():
        run = ClusteringRun.objects.create(
            source=source, model=model, eps=estimator.eps_, min_samples=min_samples, n_experts=len(summaries),
            fingerprint=fingerprint, n_queries=len(ids), n_topics=estimator.n_clusters_,
            noise_share=float((labels == -1).mean()),
        )
        proposals = {}
        for i, summary in enumerate(summaries):
            name = " / ".join(summary.keywords[:3]) or f"Proposal {i + 1}"
            centroid, cohesion = _group_stats(x[groups == summary.label])
            proposals[summary.label] = Proposal.objects.create(
                run=run, index=i, name=name[:128], keywords=summary.keywords,
                representatives=[rows[j][1] for j in summary.representatives], size=summary.size,
                centroid=centroid, cohesion=cohesion,
            )
        Assignment.objects.bulk_create(
            [Assignment(run=run, query_id=pk, topic=int(t), proposal=proposals.get(int(g))) for pk, t, g in zip(ids, labels, groups, strict=True)],
            batch_size=5000,
        )
    return run


# --- review ---------------------------------------------------------------------------------------

class ReviewError(ValueError):
    """A review action that cannot be done, with a message for the reviewer."""


def _record(run: ClusteringRun, action: str, user: Any, summary: str, details: dict[str, Any] | None = None, undo: dict[str, Any] | None = None) -> ReviewAction:
    return ReviewAction.objects.create(
        run=run, user=user if getattr(user, "is_authenticated", False) else None, action=action, summary=summary[:255],
        details=details or {}, undo_state=undo or {},
    )


def _lock(run: ClusteringRun) -> ClusteringRun:
    """The run's row, locked for this transaction: reviewers acting at once queue instead of interleaving."""
    locked = ClusteringRun.objects.select_for_update().get(pk=run.pk)
    if locked.status == RunStatus.PROMOTED:
        raise ReviewError("this run has been promoted; start a new clustering run to change it")
    return locked


def _editable(proposal: Proposal) -> None:
    if proposal.status == ProposalStatus.PROMOTED:
        raise ReviewError(f"'{proposal.name}' is promoted to an expert and can no longer change")
    if proposal.status != ProposalStatus.PROPOSED:
        raise ReviewError(f"'{proposal.name}' is {proposal.get_status_display().lower()}")


def _refresh(proposal: Proposal) -> None:
    """Recompute a proposal's size, centroid and cohesion from its queries' cached embeddings."""
    ids = list(Assignment.objects.filter(proposal=proposal).order_by("query_id").values_list("query_id", flat=True))
    proposal.size = len(ids)
    try:
        proposal.centroid, proposal.cohesion = _group_stats(load_embeddings(ids, proposal.run.model)) if ids else (None, None)
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


def _next_index(run: ClusteringRun) -> int:
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
        if other.pk == target.pk or other.run_id != target.run_id:
            continue
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
    index = _next_index(run)
    for summary in describe_groups(texts, x, groups):
        name = " / ".join(summary.keywords[:3]) or f"{proposal.name} {summary.label + 1}"
        centroid, cohesion = _group_stats(x[groups == summary.label])
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


@transaction.atomic
def move_queries(run: ClusteringRun, query_ids: list[int], target: Proposal | None, user: Any = None) -> int:
    """Move queries of a run to another proposal (``None``: leave them unassigned); returns how many moved."""
    run = _lock(run)
    if target is not None:
        if target.run_id != run.pk:
            raise ReviewError("that proposal belongs to another run")
        _editable(target)
    rows = list(Assignment.objects.filter(run=run, query_id__in=query_ids).values_list("pk", "proposal_id", "proposal__status"))
    if not rows:
        raise ReviewError("choose at least one query to move")
    if any(status == ProposalStatus.PROMOTED for _, _, status in rows):
        raise ReviewError("queries of a promoted proposal can no longer move")
    previous = _reassign(run, [(pk, pid) for pk, pid, _ in rows], target)
    count = sum(len(v) for v in previous.values())
    where = f"'{target.name}'" if target else "unassigned"
    _record(run, ReviewActionKind.MOVE, user, f"Moved {count} {'query' if count == 1 else 'queries'} to {where}",
            {"queries": list(query_ids)[:100], "target": target.pk if target else None}, {"previous": previous})
    return count


@transaction.atomic
def detach_noise(run: ClusteringRun, user: Any = None) -> int:
    """Take every noise query (DBSCAN topic -1) out of its proposal, to attach only the close ones back."""
    run = _lock(run)
    rows = list(Assignment.objects.filter(run=run, topic=-1, proposal__status=ProposalStatus.PROPOSED).values_list("pk", "proposal_id"))
    if not rows:
        raise ReviewError("no noise query sits in an open proposal")
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
        raise ReviewError("there is no open proposal to attach queries to")
    rows = list(Assignment.objects.filter(run=run, proposal__isnull=True).order_by("query_id").values_list("pk", "query_id"))
    if not rows:
        raise ReviewError("no query is unassigned")
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
            raise ReviewError("there is nothing to undo")
        raise ReviewError(f"'{latest.summary}' cannot be undone, nor anything before it")
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
    be undone.
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
    next_index = _next_index(run)
    for label in labels:
        group = sorted(by_label.get(label, []), key=lambda p: -p.size)
        if group:
            target = group[0]
            if len(group) > 1:
                _do_merge(target, group[1:])
                actions.append(f"merged {len(group)} proposals into one for {label}")
        else:
            target = Proposal.objects.create(run=run, index=next_index, name=label, keywords=[], size=0)
            next_index += 1
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
    if moved:
        actions.append(f"relabelled {sum(len(v) for v in moved.values())} queries to their known domain")
    for label, target in target_for.items():
        if target.name != label:
            _do_rename(target, label)
    _refresh_ids([t.pk for t in target_for.values()] + [pid for pid in set(current.values()) if pid is not None])
    _record(run, ReviewActionKind.ALIGN, user, f"Aligned with known labels ({len(labels)} labels)", {"summary": actions})
    return actions


def _promote(proposal: Proposal, name: str, description: str, team: Any, seed_queries: list[str] | None) -> Any:
    slug = proposal.expert.slug if proposal.expert else expert_services.slug_for(name)
    expert, _ = expert_services.upsert_expert(slug, name, description=description, keywords=proposal.keywords)
    if team is not None and expert.team_id != team.pk:
        expert.team = team
        expert.save(update_fields=["team"])
    proposal.name = name[:128]
    proposal.expert, proposal.status = expert, ProposalStatus.PROMOTED
    proposal.seed_queries = list(seed_queries if seed_queries is not None else proposal.representatives)
    proposal.save(update_fields=["name", "expert", "status", "seed_queries"])
    return expert


def default_description(proposal: Proposal) -> str:
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
        team: the auth ``Group`` that owns the expert, if any.
        seed_queries: example queries kept with the proposal (default: its representatives).
        user: who did it.

    Returns the expert. Promotion ends undo: neither it nor anything before it can be undone.
    """
    run = _lock(proposal.run)
    _editable(proposal)
    name = " ".join(name.split())[:128]
    if not name:
        raise ReviewError("the expert needs a name")
    expert = _promote(proposal, name, description.strip() or default_description(proposal), team, seed_queries)
    _record(run, ReviewActionKind.PROMOTE, user, f"Promoted '{name}' to expert '{expert.slug}'" + (f" owned by {team.name}" if team else ""),
            {"proposal": proposal.pk, "expert": expert.pk, "slug": expert.slug, "team": team.pk if team else None, "seed_queries": proposal.seed_queries})
    return expert


@transaction.atomic
def promote_run(run: ClusteringRun, user: Any = None) -> list[Any]:
    """Turn every reviewed proposal into an expert and mark the run promoted (idempotent)."""
    experts = []
    if not run.proposals.filter(status__in=OPEN_STATUSES).exists():
        raise ReviewError("no proposal is left to promote; undo a discard, or start a new clustering run")
    for proposal in run.proposals.filter(status__in=OPEN_STATUSES).select_related("expert").order_by("index"):
        if proposal.status == ProposalStatus.PROMOTED and proposal.expert is not None:
            experts.append(proposal.expert)  # promoted by hand: keep the name, description and team chosen then
            continue
        experts.append(_promote(proposal, proposal.name, default_description(proposal), None, None))
    if run.status != RunStatus.PROMOTED:
        run.status = RunStatus.PROMOTED
        run.save(update_fields=["status"])
        _record(run, ReviewActionKind.FINISH, user, f"Finished the review: {len(experts)} experts", {"experts": [e.slug for e in experts]})
    return experts


def enqueue_discovery(source: str = "", eps: float | None = None, min_samples: int = 5, n_experts: int | None = None, user: Any = None) -> Job:
    """Enqueue one job that embeds the missing queries and clusters them into a new run to review."""
    from . import tasks  # tasks import this module

    params = {"source": source, "eps": eps, "min_samples": min_samples, "n_experts": n_experts, "attach_noise": False}
    key = "discover:" + hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    title = f"Discover experts in {source or 'all queries'}"
    return enqueue_once("discover", key, title, tasks.discover, params, user)


# --- the review queue (served questions labelled by a reviewer) -----------------------------------

REVIEW_SOURCE = "review"
REVIEW_REASONS = ("low_confidence", "abstained", "thumbs_down")


def _review_proposal(run: ClusteringRun, expert: Any) -> Proposal:
    """The promoted proposal of ``expert`` in ``run``; one is added when the expert has none there.

    The router learns from promoted proposals of the latest promoted run, so a label for an expert
    promoted elsewhere (or created by hand) still reaches the next training.
    """
    proposal = run.proposals.filter(status=ProposalStatus.PROMOTED, expert=expert).order_by("index").first()
    if proposal is None:
        proposal = Proposal.objects.create(
            run=run, index=_next_index(run), name=expert.name[:128], status=ProposalStatus.PROMOTED, expert=expert,
            keywords=list(expert.keywords or []), representatives=[],
        )
    return proposal


@transaction.atomic
def record_review_decision(
    request_id: str, question: str, reason: str, routed_expert: str, expert: Any, user: Any = None,
) -> tuple[ReviewDecision, bool]:
    """Label one served question with the right expert (or dismiss it with ``expert=None``).

    The labelled question is stored as a ``Query`` (source ``review``, split ``train``) assigned to the
    expert's promoted proposal of the latest promoted run, so ``train_router_from_labels`` trains on it.
    One decision per request id: a repeated submit returns the first decision and ``created=False``.

    Raises ``ReviewError`` when the question cannot become training data (no text, no promoted run).
    """
    existing = ReviewDecision.objects.filter(request_id=request_id).first()
    if existing is not None:
        return existing, False
    if reason not in REVIEW_REASONS:
        raise ReviewError(f"unknown review reason {reason!r}")
    query = None
    if expert is not None:
        text = " ".join((question or "").split())
        if not text:
            raise ReviewError("this request has no stored question text (STORE_QUESTION_TEXT was off); it can only be dismissed")
        run = latest_promoted_run()
        if run is None:
            raise ReviewError("no promoted clustering run to add the label to: promote experts in Discovery first")
        # Lock the run's row (not _lock: a promoted run is exactly what review labels extend).
        run = ClusteringRun.objects.select_for_update().get(pk=run.pk)
        row_hash = hashlib.sha256(json.dumps([REVIEW_SOURCE, request_id, text]).encode()).hexdigest()
        query, _ = Query.objects.get_or_create(
            row_hash=row_hash,
            defaults={"text": text, "text_hash": text_hash(text), "source": REVIEW_SOURCE, "label": expert.slug, "split": "train"},
        )
        proposal = _review_proposal(run, expert)
        # topic -1: the query was not clustered; it belongs to the proposal by the reviewer's word.
        Assignment.objects.update_or_create(run=run, query=query, defaults={"topic": -1, "proposal": proposal})
        # Size only: the new query has no embedding yet, and the centroid should not be lost over it.
        Proposal.objects.filter(pk=proposal.pk).update(size=Assignment.objects.filter(proposal=proposal).count())
    decision, created = ReviewDecision.objects.get_or_create(
        request_id=request_id,
        defaults={"reason": reason, "routed_expert": routed_expert or "", "expert": expert, "query": query, "user": user},
    )
    return decision, created
