"""The bundled demo: the real pipeline, run as Celery jobs, on a doc2dial subset.

import questions → embed → cluster into proposals → scripted review (align the proposals with the
questions' known agencies, as a domain team would in the console) → promote to experts → index each
expert's documents into its own collection → train the router. Every step is idempotent, so a rerun
reuses what exists.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from experts import services as expert_services
from jobs.choices import JobStatus
from jobs.models import Job
from jobs.services import enqueue_once
from knowledge import services as knowledge_services
from knowledge import tasks as knowledge_tasks
from labeling import proposals as labeling_proposals
from labeling import tasks as labeling_tasks
from labeling.models import ClusteringRun
from routing import tasks as routing_tasks

SOURCE = "demo-doc2dial"


class DemoFailed(Exception):
    """A demo step's job failed."""


def wait(job: Job, say: Callable[[str], None], timeout: float = 1800) -> Job:
    """Block until ``job`` ends, printing its progress; raise ``DemoFailed`` if it failed."""
    deadline, last = time.monotonic() + timeout, ""
    while True:
        job.refresh_from_db()
        line = f"  {job.title}: {job.status} {job.percent}% {job.message}"
        if line != last:
            say(line)
            last = line
        if job.status == JobStatus.SUCCEEDED:
            return job
        if job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            raise DemoFailed(f"{job.title} failed: {job.error.splitlines()[0] if job.error else job.status}")
        if job.status == JobStatus.QUEUED and settings.CELERY_TASK_ALWAYS_EAGER:
            # Eager tasks run as soon as their job commits; still queued means it never will.
            raise DemoFailed(f"{job.title} was never sent: it was enqueued inside a transaction that has not committed")
        if time.monotonic() > deadline:
            raise DemoFailed(f"{job.title} did not finish within {timeout:.0f} s; is the Celery worker running?")
        time.sleep(0.5)


def load_demo(demo_dir: Path | None = None, say: Callable[[str], None] = print, n_experts: int = 4) -> dict[str, Any]:
    """Run the demo pipeline; returns a summary (experts, documents per expert, router version)."""
    demo_dir = Path(demo_dir or settings.DEMO_DIR)
    queries = demo_dir / "queries.jsonl"
    agencies = json.loads((demo_dir / "agencies.json").read_text())

    say("1/6 importing the demo questions")
    job = enqueue_once("import_queries", f"import:{SOURCE}:{queries}", "Import demo questions", labeling_tasks.import_queries,
                       {"path": str(queries), "name": queries.name, "source": SOURCE})
    result = wait(job, say).result
    say(f"  imported {result.get('imported', 0)} new questions ({result.get('duplicates', 0)} already there)")

    say("2/6 embedding the questions")
    wait(enqueue_once("embed_queries", f"embed:{SOURCE}", "Embed demo questions", labeling_tasks.embed_queries, {"source": SOURCE}), say)

    say("3/6 clustering the questions into expert proposals")
    job = wait(enqueue_once("cluster_queries", f"cluster:{SOURCE}", "Cluster demo questions", labeling_tasks.cluster_queries,
                            {"source": SOURCE, "min_samples": 3, "n_experts": n_experts}), say)
    run = ClusteringRun.objects.get(pk=job.result["run"])
    say(f"  {run.n_topics} topics (eps {run.eps:.3f}, {run.noise_share:.0%} noise) grouped into {run.proposals.count()} proposals")

    say("4/6 reviewing the proposals and promoting them to experts")
    if run.status != "promoted":
        for action in labeling_proposals.align_with_labels(run):
            say(f"  scripted review: {action}")
        labeling_proposals.promote_run(run)
    for slug, info in agencies.items():
        expert_services.upsert_expert(slug, info["name"])
    say("  experts: " + ", ".join(sorted(agencies)))

    say("5/6 indexing each expert's documents into its own collection")
    from experts.models import Expert

    documents = {}
    for slug in sorted(agencies):
        expert = Expert.objects.get(slug=slug)
        changed = 0
        for line in open(demo_dir / "documents" / f"{slug}.jsonl"):
            row = json.loads(line)
            _, was_changed = knowledge_services.upsert_document(
                expert, knowledge_services.DocumentInput(external_id=row["id"], title=row["title"], text=row["text"], metadata=row.get("metadata"))
            )
            changed += was_changed
        wait(enqueue_once("index_documents", f"index:{slug}", f"Index {expert.name} documents", knowledge_tasks.index_expert_documents, {"expert": slug}), say)
        documents[slug] = expert.documents.count()
    say("  documents per expert: " + ", ".join(f"{k} {v}" for k, v in documents.items()))

    say("6/6 training the router")
    job = wait(enqueue_once("train_router", "train_router", "Train router", routing_tasks.train_router, {"seed": 0}), say)
    say(f"  router v{job.result.get('router_version')} active, validation accuracy {job.result.get('val_accuracy') or 0:.3f}")
    return {"experts": sorted(agencies), "documents": documents, "router_version": job.result.get("router_version"), "clustering_run": run.pk}
