"""Importing query logs, embedding them, clustering them and reviewing expert proposals."""

from __future__ import annotations

import hashlib
import json
import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
from django.conf import settings
from django.db import transaction

from experts import services as expert_services
from experts.ml.clustering import SparseDBSCAN, describe_groups, group_topics, suggest_n_groups
from jobs.services import JobFailed, JobReporter
from sbcommon.encoders import get_encoder
from sbcommon.hashing import text_hash

from .choices import ProposalStatus, RunStatus
from .importers import Row, RowError, detect_format, iter_rows
from .models import Assignment, ClusteringRun, Embedding, Proposal, Query

logger = logging.getLogger(__name__)
IMPORT_BATCH = 2000
MAX_REPORTED_ERRORS = 200


@dataclass
class ImportReport:
    """What an import did: rows read, imported, skipped as duplicates, and the rejected lines."""

    rows: int = 0
    imported: int = 0
    duplicates: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    error_count: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"rows": self.rows, "imported": self.imported, "duplicates": self.duplicates, "error_count": self.error_count, "errors": self.errors}


def _row_hash(row: Row, source: str) -> str:
    key = json.dumps([source, row.text, row.timestamp.isoformat() if row.timestamp else "", row.user, row.conversation, row.label])
    return hashlib.sha256(key.encode()).hexdigest()


def _flush(batch: list[Query], report: ImportReport) -> None:
    if not batch:
        return
    with transaction.atomic():
        hashes = [q.row_hash for q in batch]
        existing = set(Query.objects.filter(row_hash__in=hashes).values_list("row_hash", flat=True))
        fresh = {q.row_hash: q for q in batch if q.row_hash not in existing}  # also drops repeats inside the batch
        Query.objects.bulk_create(list(fresh.values()), ignore_conflicts=True)
    report.imported += len(fresh)
    report.duplicates += len(batch) - len(fresh)
    batch.clear()


def import_queries(stream: IO[bytes], name: str, source: str, redact: bool = False, reporter: JobReporter | None = None, total_bytes: int | None = None) -> ImportReport:
    """Import a CSV/JSONL query log, streamed, one transaction per batch; reruns import nothing twice.

    Args:
        stream: binary file object.
        name: file name (for the format).
        source: label for where the queries came from.
        redact: replace e-mail addresses and phone numbers before storing.
        reporter: progress sink.
        total_bytes: file size, for progress.
    """
    reporter = reporter or JobReporter()
    if hasattr(stream, "peek"):
        head = stream.peek(64)[:64]
    else:
        position = stream.tell()
        head = stream.read(64)
        stream.seek(position)
    fmt = detect_format(name, head)
    report = ImportReport()
    batch: list[Query] = []
    for item in iter_rows(stream, fmt, do_redact=redact):
        if isinstance(item, RowError):
            report.error_count += 1
            if len(report.errors) < MAX_REPORTED_ERRORS:
                report.errors.append({"line": item.line, "reason": item.reason})
            continue
        report.rows += 1
        batch.append(
            Query(
                text=item.text, text_hash=text_hash(item.text), row_hash=_row_hash(item, source), source=source,
                label=item.label, user=item.user, conversation=item.conversation, timestamp=item.timestamp, split=item.split,
            )
        )
        if len(batch) >= IMPORT_BATCH:
            _flush(batch, report)
            if total_bytes:
                try:
                    reporter.progress(min(0.99, stream.tell() / total_bytes), f"{report.rows} rows read")
                except (OSError, ValueError):
                    pass
    _flush(batch, report)
    return report


def embed_missing(model: str | None = None, source: str | None = None, reporter: JobReporter | None = None) -> dict[str, int]:
    """Embed every query text that has no cached embedding for ``model`` yet (resumable)."""
    reporter = reporter or JobReporter()
    model = model or settings.EMBEDDING_MODEL
    queries = Query.objects.all()
    if source:
        queries = queries.filter(source=source)
    wanted = dict(queries.values_list("text_hash", "text").distinct())
    cached = set(Embedding.objects.filter(model=model, text_hash__in=list(wanted)).values_list("text_hash", flat=True)) if len(wanted) < 50000 else set(Embedding.objects.filter(model=model).values_list("text_hash", flat=True))
    todo = [(h, t) for h, t in wanted.items() if h not in cached]
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


def load_embeddings(query_ids: list[int], model: str) -> np.ndarray:
    """Cached embeddings for these queries, in order (raises if any is missing)."""
    hashes = dict(Query.objects.filter(pk__in=query_ids).values_list("pk", "text_hash"))
    vectors = {h: np.frombuffer(bytes(v), dtype="<f4") for h, v in Embedding.objects.filter(model=model, text_hash__in=set(hashes.values())).values_list("text_hash", "vector")}
    missing = [pk for pk in query_ids if hashes.get(pk) not in vectors]
    if missing:
        raise JobFailed(f"{len(missing)} queries have no embedding for {model}; run the embedding job first")
    return np.stack([vectors[hashes[pk]] for pk in query_ids]).astype(np.float32)


def cluster_queries(source: str = "", eps: float | None = None, min_samples: int = 5, n_experts: int | None = None, reporter: JobReporter | None = None) -> ClusteringRun:
    """Cluster the (embedded) queries into topics and group them into expert proposals.

    Same inputs and parameters as an earlier run → that run is returned, nothing is recomputed.
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
    fingerprint = hashlib.sha256(json.dumps([source, model, eps, min_samples, n_experts, len(ids), ids[-1]]).encode()).hexdigest()
    existing = ClusteringRun.objects.filter(fingerprint=fingerprint).first()
    if existing is not None:
        return existing
    x = load_embeddings(ids, model)
    reporter.progress(0.2, "clustering")
    estimator = SparseDBSCAN(eps=eps, min_samples=min_samples, n_components=64 if len(ids) > 20000 else None).fit(x)
    labels = estimator.labels_
    reporter.progress(0.6, f"{estimator.n_clusters_} topics; grouping into experts")
    k = n_experts or suggest_n_groups(x, labels)
    groups = group_topics(x, labels, k)
    summaries = describe_groups([t for _, t in rows], x, groups)
    with transaction.atomic():
        run = ClusteringRun.objects.create(
            source=source, model=model, eps=estimator.eps_, min_samples=min_samples, n_experts=len(summaries),
            fingerprint=fingerprint, n_queries=len(ids), n_topics=estimator.n_clusters_,
            noise_share=float((labels == -1).mean()),
        )
        proposals = {}
        for i, summary in enumerate(summaries):
            name = " / ".join(summary.keywords[:3]) or f"Proposal {i + 1}"
            proposals[summary.label] = Proposal.objects.create(
                run=run, index=i, name=name[:128], keywords=summary.keywords,
                representatives=[rows[j][1] for j in summary.representatives], size=summary.size,
            )
        Assignment.objects.bulk_create(
            [Assignment(run=run, query_id=pk, topic=int(t), proposal=proposals.get(int(g))) for pk, t, g in zip(ids, labels, groups, strict=True)],
            batch_size=5000,
        )
    return run


# --- review ---------------------------------------------------------------------------------------

def _log(run: ClusteringRun, action: str, **details: Any) -> None:
    run.review_log = [*run.review_log, {"action": action, **details}]
    run.save(update_fields=["review_log"])


def _refresh(proposal: Proposal) -> None:
    proposal.size = proposal.assignments.count()
    proposal.save(update_fields=["size"])


@transaction.atomic
def merge_proposals(target: Proposal, others: list[Proposal]) -> Proposal:
    """Move the queries of ``others`` into ``target`` and mark them merged."""
    for other in others:
        if other.pk == target.pk or other.run_id != target.run_id:
            continue
        Assignment.objects.filter(proposal=other).update(proposal=target)
        other.status, other.merged_into, other.size = ProposalStatus.MERGED, target, 0
        other.save(update_fields=["status", "merged_into", "size"])
        _log(target.run, "merge", source=other.name, into=target.name)
    _refresh(target)
    return target


@transaction.atomic
def rename_proposal(proposal: Proposal, name: str) -> Proposal:
    old, proposal.name = proposal.name, name.strip()[:128]
    if not proposal.name:
        raise ValueError("a proposal needs a name")
    proposal.save(update_fields=["name"])
    _log(proposal.run, "rename", old=old, new=proposal.name)
    return proposal


@transaction.atomic
def discard_proposal(proposal: Proposal) -> Proposal:
    proposal.status = ProposalStatus.DISCARDED
    proposal.save(update_fields=["status"])
    _log(proposal.run, "discard", name=proposal.name)
    return proposal


@transaction.atomic
def align_with_labels(run: ClusteringRun) -> list[str]:
    """Review by known labels: one proposal per label, every labelled query under its own label.

    Proposals whose majority label is the same are merged; a label without a proposal gets one;
    queries are moved to their label's proposal; proposals are renamed after their label. Returns
    what was done, in words, so a scripted review can say so.
    """
    actions: list[str] = []
    assignments = Assignment.objects.filter(run=run).select_related("query", "proposal")
    majority: dict[int, Counter[str]] = {}
    for a in assignments:
        if a.proposal_id and a.query.label:
            majority.setdefault(a.proposal_id, Counter())[a.query.label] += 1
    by_label: dict[str, list[Proposal]] = {}
    for proposal in run.proposals.filter(status=ProposalStatus.PROPOSED):
        counts = majority.get(proposal.pk)
        if not counts:
            discard_proposal(proposal)
            actions.append(f"discarded '{proposal.name}' (no labelled queries)")
            continue
        label, hits = counts.most_common(1)[0]
        by_label.setdefault(label, []).append(proposal)
        purity = hits / sum(counts.values())
        actions.append(f"'{proposal.name}' is mostly {label} ({purity:.0%} of its labelled queries)")
    labels = sorted({a.query.label for a in assignments if a.query.label})
    target_for: dict[str, Proposal] = {}
    next_index = run.proposals.count()
    for label in labels:
        group = sorted(by_label.get(label, []), key=lambda p: -p.size)
        if group:
            target = group[0]
            if len(group) > 1:
                merge_proposals(target, group[1:])
                actions.append(f"merged {len(group)} proposals into one for {label}")
        else:
            target = Proposal.objects.create(run=run, index=next_index, name=label, keywords=[], size=0)
            next_index += 1
            actions.append(f"created a proposal for {label} (the clustering found none)")
        target_for[label] = target
    moved = 0
    for a in assignments:
        wanted = target_for.get(a.query.label)
        if wanted is not None and a.proposal_id != wanted.pk:
            a.proposal = wanted
            a.save(update_fields=["proposal"])
            moved += 1
    if moved:
        actions.append(f"relabelled {moved} queries to their known domain")
    for label, target in target_for.items():
        if target.name != label:
            rename_proposal(target, label)
        _refresh(target)
    _log(run, "align_with_labels", summary=actions)
    return actions


@transaction.atomic
def promote_run(run: ClusteringRun) -> list[Any]:
    """Turn every reviewed proposal into an expert (idempotent: existing experts are updated)."""
    experts = []
    for proposal in run.proposals.filter(status__in=[ProposalStatus.PROPOSED, ProposalStatus.PROMOTED]).order_by("index"):
        slug = proposal.expert.slug if proposal.expert else expert_services.slug_for(proposal.name)
        expert, _ = expert_services.upsert_expert(
            slug, proposal.name, description=f"Discovered from {proposal.size} queries: " + "; ".join(proposal.representatives[:3]),
            keywords=proposal.keywords,
        )
        proposal.expert, proposal.status = expert, ProposalStatus.PROMOTED
        proposal.save(update_fields=["expert", "status"])
        experts.append(expert)
    run.status = RunStatus.PROMOTED
    run.save(update_fields=["status"])
    return experts
