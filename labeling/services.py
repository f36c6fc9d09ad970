"""Importing query logs, embedding them, clustering them into proposals, and the review queue's decisions.

The edits of proposals before promotion are in ``labeling.proposals``.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import DatabaseError, transaction
from django.db.models import QuerySet
from django.utils.text import slugify

from encoders import bulk_threads, embedding_space, get_encoder
from experts.models import Expert
from experts.services import slug_for, upsert_expert
from jobs.models import Job
from jobs.services import JobFailed, JobReporter, enqueue_once
from sbcommon import uploads
from sbcommon.hashing import text_hash
from sbcommon.uploads import UploadRejected, check_size

from .access import can_review, team_for_new_work
from .choices import ProposalStatus, ReviewActionKind, RunStatus
from .importers import SNIFF_BYTES, Row, RowError, UnreadableFile, detect_format, iter_rows, sniff
from .ml.dbscan import SparseDBSCAN
from .ml.discovery import DEFAULT_GROUPING, DEFAULT_NOISE, discover
from .ml.grouping import describe_groups
from .ml.seeding import NO_EVIDENCE, by_documents, conversation_evidence
from .models import Assignment, ClusteringRun, Embedding, Proposal, Query, ReviewAction, ReviewDecision
from .proposals import ReviewError, group_stats, next_index
from .seeding import documented_experts, question_evidence
from .selectors import chunks, load_embeddings, promoted_run_of, team_queries

logger = logging.getLogger(__name__)
IMPORT_BATCH = 2000
MAX_REPORTED_ERRORS = 200


# --- import ---------------------------------------------------------------------------------------

class ImportRejected(JobFailed):
    """The file cannot be imported at all; nothing was written."""


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
        return {**asdict(self), "failed_rows": self.failed_rows}


def max_import_bytes() -> int:
    """The largest query log accepted for import (setting ``QUERY_IMPORT_MAX_BYTES``)."""
    return settings.QUERY_IMPORT_MAX_BYTES


def default_source(name: str) -> str:
    """The source label a file gets when none is given: its name without folders and extension."""
    stem = Path(name).name.split(".")[0]
    return re.sub(r"[^\w.-]+", "-", stem).strip("-")[:128] or "upload"


def _row_hash(row: Row, source: str, team: Any = None) -> str:
    fields: list[Any] = [source, row.text, row.timestamp.isoformat() if row.timestamp else "", row.user, row.conversation, row.label]
    if team is not None:
        # The same row imported by two teams is two rows, one each (appended only then: rows without a team keep their hashes).
        fields.append(f"team:{team.pk}")
    key = json.dumps(fields)
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


def import_queries(
    stream: IO[bytes], name: str, source: str, redact: bool = False, reporter: JobReporter | None = None, total_bytes: int | None = None,
    team: Any = None,
) -> ImportReport:
    """Import a CSV/TSV/JSONL query log, streamed, one transaction per batch; reruns import nothing twice.

    A row is identified by the hash of its content (source, text, timestamp, user, conversation,
    label) and its team, so a rerun, or a row repeated in the file, counts as a duplicate, while
    another team's copy of the same row never does (the report cannot tell a team what another
    imported). Rejected rows are reported with their line numbers; a batch the database refuses is
    rolled back alone and reported by its line range, and a rerun imports it without duplicating the rest.

    Args:
        stream: binary file object.
        name: file name (for the format).
        source: label for where the queries came from.
        redact: replace e-mail addresses and phone numbers before storing.
        reporter: progress sink.
        total_bytes: file size, for progress.
        team: the auth group the queries belong to (``labeling.access``); ``None``: staff only.

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
            text=item.text, text_hash=text_hash(item.text), row_hash=_row_hash(item, source, team), source=source,
            label=item.label, user=item.user, conversation=item.conversation, timestamp=item.timestamp, split=item.split,
            answer=item.answer, team=team,
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
    check_size(upload.size, max_import_bytes())
    upload.seek(0)
    head = upload.read(SNIFF_BYTES)
    upload.seek(0)
    try:
        return sniff(head, upload.name, complete=len(head) >= upload.size).fmt
    except UnreadableFile as exc:
        raise UploadRejected(str(exc)) from exc


def upload_dir() -> Path:
    return Path(settings.VAR_DIR) / "uploads"


def accept_upload(upload: Any, source: str = "", redact: bool = False, user: Any = None, team: Any = None) -> Job:
    """Validate, store and enqueue an uploaded query log for ``user``'s team; the same file twice gives the same active job.

    The queries belong to ``team`` as ``access.team_for_new_work`` settles it for ``user`` (default:
    the user's only team; with no user, ``team`` as given); the job's ``params["team"]`` is its id
    (``None``: staff only).

    Raises:
        PermissionDenied: ``user`` may not import (no team, or not in ``team``).
        TeamNeeded: ``user`` is in several teams and named none.
        UploadRejected: see ``check_upload``.
    """
    from . import tasks  # tasks import this module

    if user is not None:  # without one: the system (a script), which names the team itself
        team = team_for_new_work(user, team)
    check_upload(upload)
    path, digest = uploads.save_upload(upload, upload_dir(), default_name="queries")  # atomically, under VAR_DIR/uploads/
    source = source.strip()[:128] or default_source(upload.name)
    team_id = team.pk if team is not None else None
    job = enqueue_once(
        "import_queries", f"import_queries:{digest}:{int(bool(redact))}:{team_id or ''}:{source}"[:255], f"Import {Path(upload.name).name[:100]} as source {source!r}",
        tasks.import_queries,
        {"path": str(path), "name": upload.name, "source": source, "redact": bool(redact), "sha256": digest, "uploaded": True, "team": team_id},
        user,
    )
    if job.params.get("path") != str(path):
        path.unlink(missing_ok=True)  # the same file is already being imported
    return job


# --- embeddings and clustering --------------------------------------------------------------------

def encode_texts(texts: list[str]) -> np.ndarray:
    """Embeddings of ``texts`` by the encoder the stored query embeddings come from (not stored: e.g. the router's typo copies)."""
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    encoder = get_encoder(embedding_space(), bulk_threads())
    return np.asarray(encoder.encode(list(texts), batch_size=settings.EMBEDDING_BATCH_SIZE), dtype=np.float32)


def embed_missing(source: str | None = None, reporter: JobReporter | None = None, queries: QuerySet[Query] | None = None) -> dict[str, int]:
    """Embed every query text that has no cached embedding for the current encoder yet (resumable).

    ``queries`` narrows it (default: every query), ``source`` too (one source name).
    """
    reporter = reporter or JobReporter()
    model = embedding_space()
    queries = Query.objects.all() if queries is None else queries
    if source:
        queries = queries.filter(source=source)
    wanted = dict(queries.values_list("text_hash", "text").distinct())
    cached: set[str] = set()
    for part in chunks(list(wanted)):
        cached.update(Embedding.objects.filter(model=model, text_hash__in=part).values_list("text_hash", flat=True))
    todo = [(h, t) for h, t in wanted.items() if h not in cached]
    if todo:  # loading the encoder costs seconds: only when there is work
        encoder = get_encoder(model, bulk_threads())
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


def cluster_queries(
    source: str = "", eps: float | None = None, min_samples: int = 5, n_experts: int | None = None,
    reporter: JobReporter | None = None, attach_noise: bool = DEFAULT_NOISE == "attach", grouping: str = DEFAULT_GROUPING,
    team: Any = None,
) -> ClusteringRun:
    """Cluster the (embedded) queries into topics and group them into expert proposals.

    The pipeline is ``labeling.ml.discovery.discover``, the one ``manage.py evaluate clustering``
    measures as ``ours_product``; its defaults (grouping, noise attachment) were chosen there on the
    datasets' train splits. Same inputs and parameters as an earlier run → that run is returned,
    nothing is recomputed.

    Args:
        source: only queries from this source of the team ("" for all of the team's).
        eps: DBSCAN radius in cosine distance (``None``: suggested from the data).
        min_samples: DBSCAN's core-point threshold.
        n_experts: proposals to group the topics into (``None``: suggested from the topics, never from labels).
        reporter: progress sink.
        attach_noise: leave every query in a proposal (noise queries keep topic -1, and the reviewer
            can detach them); when false DBSCAN's noise stays unassigned for the reviewer to attach.
        grouping: one of ``labeling.ml.discovery.GROUPINGS``.
        team: the auth group whose imported queries it clusters, and which reviews the run; ``None``:
            the queries imported with no team, in a staff-only run.
    """
    reporter = reporter or JobReporter()
    model = embedding_space()
    queries = team_queries(team).order_by("pk")
    if source:
        queries = queries.filter(source=source)
    logged = list(queries.values_list("pk", "text", "conversation", "timestamp"))
    rows = [(pk, text) for pk, text, _, _ in logged]
    opener = conversation_openers([(conversation, timestamp) for _, _, conversation, timestamp in logged])
    openers = sorted(set(opener))
    if len(openers) < max(10, min_samples * 2):
        raise JobFailed(f"only {len(openers)} questions open a conversation or stand alone; import at least {max(10, min_samples * 2)}")
    ids = [pk for pk, _ in rows]
    key: list[Any] = [source, model, eps, min_samples, n_experts, len(ids), ids[-1]]
    if not attach_noise:
        key.append("noise-unassigned")  # appended only when set, so earlier runs keep their fingerprints
    key.append(f"grouping:{grouping}")  # a run grouped another way is another run
    if team is not None:
        key.append(f"team:{team.pk}")  # appended only when set, as above; another team's run is never returned
    if len(openers) < len(rows):
        key.append(f"follow-ups:{len(rows) - len(openers)}")  # as above: a log without conversations keeps its fingerprint
    # The team's experts with documents seed the run when there is one per proposal asked for (labeling.ml.seeding).
    seeds = documented_experts(team)
    if not seeds or (n_experts is not None and n_experts != len(seeds)):
        seeds = []
    else:
        key.append("documents:" + ",".join(f"{e.slug}:{e.passages}:{e.indexed:%Y%m%d%H%M%S%f}" for e in seeds))  # as above
    fingerprint = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    existing = ClusteringRun.objects.filter(fingerprint=fingerprint).exclude(status=RunStatus.DISCARDED).first()
    if existing is not None:
        return existing
    # Only the questions that open a conversation (or stand alone) are clustered, and only they name and
    # represent a proposal: a follow-up ("When did it take place?") says little on its own; it goes with its opener.
    # A seeded run reads every question's vector (follow-ups weigh in on their conversation's department), else the openers'.
    everyone = load_embeddings(ids, model) if seeds else None
    x = everyone[openers] if everyone is not None else load_embeddings([ids[i] for i in openers], model)
    reporter.progress(0.2, f"clustering {len(openers)} questions" + (f" ({len(rows) - len(openers)} follow-ups go with their conversation's first)"
                                                                     if len(openers) < len(rows) else ""))
    # Exact DBSCAN on the full embeddings (docs/EVALUATIONS.md, "Measured and removed": PCA first).
    estimator = SparseDBSCAN(eps=eps, min_samples=min_samples).fit(x)
    reporter.progress(0.6, f"{estimator.n_clusters_} topics; grouping into experts")
    found = discover(x, estimator, n_groups=n_experts, grouping=grouping, noise="attach" if attach_noise else "leave")
    own = None  # in a run the documents seed: each question's own best-matching expert
    if seeds:
        reporter.log(f"each question goes to the expert whose documents match it best: {', '.join(e.name for e in seeds)}")
        evidence = question_evidence(seeds, [text for _, text in rows], everyone)
        found.groups = by_documents(conversation_evidence(evidence, opener, openers))
        own = by_documents(evidence)
    summaries = describe_groups([rows[i][1] for i in openers], x, found.groups)
    place = {row: k for k, row in enumerate(openers)}
    labels = np.array([estimator.labels_[place[opener[i]]] for i in range(len(rows))])
    groups = np.array([found.groups[place[opener[i]]] for i in range(len(rows))])
    reporter.progress(0.8, f"{len(summaries)} proposals; saving")
    with transaction.atomic():
        run = ClusteringRun.objects.create(
            source=source, team=team, model=model, eps=estimator.eps_, min_samples=min_samples, n_experts=len(summaries),
            fingerprint=fingerprint, n_queries=len(ids), n_topics=estimator.n_clusters_,
            noise_share=float((estimator.labels_ == -1).mean()),
        )
        proposals = {}
        for i, summary in enumerate(summaries):
            seed = seeds[summary.label] if seeds and summary.label >= 0 else None  # promoting it adds the questions to that expert
            name = seed.name if seed else " / ".join(summary.keywords[:3]) or f"Proposal {i + 1}"
            centroid, cohesion = group_stats(x[found.groups == summary.label])
            proposals[summary.label] = Proposal.objects.create(
                run=run, index=i, name=name[:128], keywords=summary.keywords,
                representatives=[rows[openers[j]][1] for j in summary.representatives], size=int((groups == summary.label).sum()),
                centroid=centroid, cohesion=cohesion, expert=seed,
            )
        # Where a question's own documents point to another expert than its conversation's, review flags it.
        elsewhere = [None] * len(ids) if own is None else [seeds[o] if o not in (NO_EVIDENCE, g) else None for o, g in zip(own.tolist(), groups.tolist(), strict=True)]
        Assignment.objects.bulk_create(
            [Assignment(run=run, query_id=pk, topic=int(t), proposal=proposals.get(int(g)), documents_point_to=e)
             for pk, t, g, e in zip(ids, labels, groups, elsewhere, strict=True)],
            batch_size=5000,
        )
    return run


def conversation_openers(turns: list[tuple[str, Any]]) -> list[int]:
    """For each logged question (its conversation id and timestamp, in import order), the position of the question
    that opened its conversation: its own for one without a conversation id or the first of its conversation (the
    earliest timestamp, then the first imported)."""
    first: dict[str, tuple[Any, int]] = {}
    for i, (conversation, timestamp) in enumerate(turns):
        if not conversation:
            continue
        when = (timestamp is None, timestamp or 0, i)
        if conversation not in first or when < first[conversation][0]:
            first[conversation] = (when, i)
    return [first[conversation][1] if conversation else i for i, (conversation, _) in enumerate(turns)]


def run_from_labels(source: str = "", team: Any = None) -> ClusteringRun:
    """A log that already says each query's domain (its ``label`` column): one proposal per label, nothing clustered.

    The run is reviewed and promoted like a discovered one (``labeling.proposals.promote_run``): its
    proposals are the labels, each with the keywords and representative queries discovery would show;
    unlabelled queries stay unassigned. Same queries → the same run. The queries must be embedded.
    """
    queries = team_queries(team).order_by("pk")
    if source:
        queries = queries.filter(source=source)
    rows = list(queries.values_list("pk", "text", "label"))
    labels = sorted({label for _, _, label in rows if label})
    if len(labels) < 2:
        raise JobFailed(f"the queries carry {len(labels)} label(s); experts from labels need at least two")
    ids = [pk for pk, _, _ in rows]
    key = [source, "labels", embedding_space(), len(ids), ids[-1], f"team:{team.pk}" if team is not None else ""]
    fingerprint = hashlib.sha256(json.dumps(key).encode()).hexdigest()
    existing = ClusteringRun.objects.filter(fingerprint=fingerprint).exclude(status=RunStatus.DISCARDED).first()
    if existing is not None:
        return existing
    x = load_embeddings(ids, embedding_space())
    groups = np.array([labels.index(label) if label else -1 for _, _, label in rows])
    summaries = describe_groups([t for _, t, _ in rows], x, groups)
    with transaction.atomic():
        run = ClusteringRun.objects.create(
            source=source, team=team, model=embedding_space(), eps=0.0, min_samples=0, n_experts=len(labels), fingerprint=fingerprint,
            n_queries=len(ids), n_topics=len(labels), noise_share=float((groups == -1).mean()),
        )
        proposals = {}
        for summary in summaries:
            centroid, cohesion = group_stats(x[groups == summary.label])
            proposals[summary.label] = Proposal.objects.create(
                run=run, index=summary.label, name=labels[summary.label][:128], keywords=summary.keywords,
                representatives=[rows[j][1] for j in summary.representatives], size=summary.size, centroid=centroid, cohesion=cohesion,
            )
        Assignment.objects.bulk_create(
            [Assignment(run=run, query_id=pk, topic=int(g), proposal=proposals.get(int(g))) for pk, g in zip(ids, groups, strict=True)], batch_size=5000,
        )
    return run


def enqueue_discovery(
    source: str = "", eps: float | None = None, min_samples: int = 5, n_experts: int | None = None, user: Any = None, team: Any = None,
) -> Job:
    """Enqueue one job that embeds the missing queries of a team and clusters them into a new run to review.

    The console's "start a run" and the monthly re-clustering both come here, with the product's
    grouping and noise attachment (``labeling.ml.discovery`` defaults: what the evaluation shows best).
    For a ``user``, the run's team is ``team`` as ``access.team_for_new_work`` settles it (default:
    the user's only team); with no user (a schedule) it is ``team`` as given, ``None`` for staff-only
    work. The job's ``params["team"]`` is the team's id.

    Raises:
        PermissionDenied: ``user`` may not start runs (no team, or not in ``team``).
        TeamNeeded: ``user`` is in several teams and named none.
    """
    from . import tasks  # tasks import this module

    if user is not None:
        team = team_for_new_work(user, team)
    params = {"source": source, "eps": eps, "min_samples": min_samples, "n_experts": n_experts,
              "attach_noise": DEFAULT_NOISE == "attach", "grouping": DEFAULT_GROUPING, "team": team.pk if team is not None else None}
    key = "discover:" + hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    title = f"Discover experts in {source or 'all queries'}" + (f" of {team.name}" if team is not None else "")
    return enqueue_once("discover", key, title, tasks.discover, params, user)


class DepartmentExists(ValueError):
    """An expert with the name's slug exists already."""


def make_department(name: str, description: str = "", user: Any = None, team: Any = None) -> Expert:
    """A new, empty expert of ``user``'s team (``access.team_for_new_work``), made before discovery so that its
    documents can be uploaded first: a discovery run then seeds its proposals with them (``labeling.seeding``).

    Raises:
        PermissionDenied, TeamNeeded: as ``team_for_new_work``.
        DepartmentExists: the name's slug is taken.
    """
    if not slugify(name):
        raise ValueError("an expert's name needs a letter or a digit")
    team = team_for_new_work(user, team) if user is not None else team
    slug = slug_for(name)
    with transaction.atomic():
        if Expert.objects.select_for_update().filter(slug=slug).exists():
            raise DepartmentExists(f"an expert named {slug!r} exists already: choose another name")
        expert, _ = upsert_expert(slug, name, description=description, team=team)
    return expert


@transaction.atomic
def discard_run(run: ClusteringRun, user: Any = None) -> ClusteringRun:
    """Set aside a run nobody will finish: it leaves the runs list, takes no more review actions and trains nothing.

    Recorded as a review action (who, when). Its queries, proposals and actions are kept; the same
    discovery started again makes a new run instead of returning this one.

    Args:
        run: a run in review.
        user: who discards it; ``None`` (a script) may discard any run.

    Raises:
        PermissionDenied: ``user`` is neither staff nor a member of the run's team.
        ReviewError: the run is promoted (its experts exist and the router learns from it) or already discarded.
    """
    if user is not None and not can_review(user, run):
        raise PermissionDenied("Only the run's team and staff may discard it.")
    locked = ClusteringRun.objects.select_for_update().get(pk=run.pk)
    if locked.status == RunStatus.PROMOTED:
        raise ReviewError("this run has been promoted: its experts exist and the router learns from it, so it cannot be discarded")
    if locked.status == RunStatus.DISCARDED:
        raise ReviewError("this run is already discarded")
    run.status = RunStatus.DISCARDED
    run.save(update_fields=["status"])
    ReviewAction.objects.create(
        run=run, user=user if getattr(user, "is_authenticated", False) else None, action=ReviewActionKind.DISCARD_RUN,
        summary=f"Discarded the run ({run.proposals.filter(status=ProposalStatus.PROPOSED).count()} proposals left in review)",
    )
    return run


# --- the review queue (served questions labelled by a reviewer) -----------------------------------

REVIEW_SOURCE = "review"
REVIEW_REASONS = ("low_confidence", "abstained", "thumbs_down", "likely_misroute")


def _review_proposal(run: ClusteringRun, expert: Any) -> Proposal:
    """The promoted proposal of ``expert`` in ``run``; one is added when the expert has none there.

    The router learns from promoted proposals of the latest promoted run, so a label for an expert
    promoted elsewhere (or created by hand) still reaches the next training.
    """
    proposal = run.proposals.filter(status=ProposalStatus.PROMOTED, expert=expert).order_by("index").first()
    if proposal is None:
        proposal = Proposal.objects.create(
            run=run, index=next_index(run), name=expert.name[:128], status=ProposalStatus.PROMOTED, expert=expert,
            keywords=list(expert.keywords or []), representatives=[],
        )
    return proposal


@transaction.atomic
def record_review_decision(
    request_id: str, question: str, reason: str, routed_expert: str, expert: Any, user: Any = None,
) -> tuple[ReviewDecision, bool]:
    """Label one served question with the right expert (or dismiss it with ``expert=None``).

    The labelled question is stored as a ``Query`` (source ``review``, split ``train``) assigned to the
    expert's promoted proposal in the newest promoted run that promoted the expert (its team's run,
    so the label never lands in another team's run), so ``train_router_from_labels`` trains on it.
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
        run = promoted_run_of(expert)
        if run is None:
            raise ReviewError(f"no promoted clustering run holds {expert.name}: promote it in Discovery first")
        # Lock the run's row (not _lock: a promoted run is exactly what review labels extend).
        run = ClusteringRun.objects.select_for_update().get(pk=run.pk)
        row_hash = hashlib.sha256(json.dumps([REVIEW_SOURCE, request_id, text]).encode()).hexdigest()
        query, _ = Query.objects.get_or_create(
            row_hash=row_hash,
            defaults={"text": text, "text_hash": text_hash(text), "source": REVIEW_SOURCE, "label": expert.slug, "split": "train", "team": run.team},
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


# --- training data for the experts' adapters ------------------------------------------------------

def enqueue_grounded_examples(expert: Expert, limit: int = 200, user: Any = None) -> Job:
    """Start the job that builds grounded examples from the expert's labelled queries and documents.

    The console's "Build grounded examples" button on the expert's training data page (one job at a
    time per expert); the task runs ``build_grounded_examples``.
    """
    from . import tasks  # tasks import this module

    return enqueue_once(
        "build_grounded_examples", f"grounded:{expert.slug}", f"Grounded training examples for {expert.name}",
        tasks.build_grounded_examples, params={"expert": expert.slug, "limit": limit}, user=user,
    )
