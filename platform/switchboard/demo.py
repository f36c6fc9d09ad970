"""The bundled demo: the real pipeline, run as Celery jobs, on a doc2dial subset.

import → embed → cluster → scripted review (aligned with the known agencies) → promote → index → train
the router; every step is idempotent. Where a language model writes the answers, ``train_demo_adapters``
then trains one adapter per expert in the background, activated only past ``experts.services.answer_gate``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from experts import services as expert_services
from experts.choices import VersionStatus
from jobs.choices import JobStatus
from jobs.models import Job
from jobs.services import enqueue_once
from knowledge import tasks as knowledge_tasks
from knowledge.ingest import upsert_document
from knowledge.parsers import DocumentInput
from labeling import proposals as labeling_proposals
from labeling import services as labeling_services
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


def load_demo(demo_dir: Path | None = None, say: Callable[[str], None] = print, on_step: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run the demo pipeline; returns a summary (experts, documents per expert, router version).

    ``on_step`` is called with each step's number (1 to 6) as the step starts: ``run_platform`` starts
    its second worker and, once the documents are indexed, the web server then.
    """
    demo_dir = Path(demo_dir or settings.DEMO_DIR)
    step = on_step or (lambda number: None)
    queries = demo_dir / "queries.jsonl"
    agencies = json.loads((demo_dir / "agencies.json").read_text())

    step(1)
    say("1/6 importing the demo questions")
    job = enqueue_once("import_queries", f"import:{SOURCE}:{queries}", "Import demo questions", labeling_tasks.import_queries,
                       {"path": str(queries), "name": queries.name, "source": SOURCE})
    result = wait(job, say).result
    say(f"  imported {result.get('imported', 0)} new questions ({result.get('duplicates', 0)} already there)")

    step(2)
    say("2/6 embedding the questions")
    wait(enqueue_once("embed_queries", f"embed:{SOURCE}", "Embed demo questions", labeling_tasks.embed_queries, {"source": SOURCE}), say)

    step(3)
    say("3/6 clustering the questions into expert proposals")
    job = wait(enqueue_once("cluster_queries", f"cluster:{SOURCE}", "Cluster demo questions", labeling_tasks.cluster_queries,
                            {"source": SOURCE, "min_samples": 3, "n_experts": 4}), say)
    run = ClusteringRun.objects.get(pk=job.result["run"])
    say(f"  {run.n_topics} topics (eps {run.eps:.3f}, {run.noise_share:.0%} noise) grouped into {run.proposals.count()} proposals")

    step(4)
    say("4/6 reviewing the proposals and promoting them to experts")
    if run.status != "promoted":
        for action in labeling_proposals.align_with_labels(run):
            say(f"  scripted review: {action}")
        labeling_proposals.promote_run(run)
    for slug, info in agencies.items():
        expert_services.upsert_expert(slug, info["name"], public=True)  # the demo answers anyone, signed in or not
    say("  experts: " + ", ".join(sorted(agencies)))

    step(5)
    say("5/6 indexing each expert's documents into its own collection")
    from experts.models import Expert

    experts = {slug: Expert.objects.get(slug=slug) for slug in sorted(agencies)}
    for slug, expert in experts.items():
        for line in open(demo_dir / "documents" / f"{slug}.jsonl"):
            row = json.loads(line)
            upsert_document(expert, DocumentInput(external_id=row["id"], title=row["title"], text=row["text"], metadata=row.get("metadata")))
    # The experts' index jobs are independent: all are queued at once, the largest first, so that a second
    # worker (``run_platform`` starts one while the demo loads) indexes one expert while the first does another.
    by_size = sorted(experts, key=lambda slug: -(demo_dir / "documents" / f"{slug}.jsonl").stat().st_size)
    jobs = {slug: enqueue_once("index_documents", f"index:{slug}", f"Index {experts[slug].name} documents",
                               knowledge_tasks.index_expert_documents, {"expert": slug}) for slug in by_size}
    for slug in by_size:
        wait(jobs[slug], say)
    documents = {slug: expert.documents.count() for slug, expert in experts.items()}
    say("  documents per expert: " + ", ".join(f"{k} {v}" for k, v in documents.items()))

    step(6)
    say("6/6 training the router")
    job = wait(enqueue_once("train_router", "train_router", "Train router", routing_tasks.train_router, {"seed": 0}), say)
    say(f"  router v{job.result.get('router_version')} active, validation accuracy {job.result.get('val_accuracy') or 0:.3f}")
    return {"experts": sorted(agencies), "documents": documents, "router_version": job.result.get("router_version"), "clustering_run": run.pk}


def adapters_wanted() -> tuple[bool, str]:
    """Whether the demo's experts should get adapters: only when a language model writes the answers."""
    if settings.GENERATOR == "extractive":
        return False, "GENERATOR=extractive: answers are extractive, no adapter would serve (GENERATOR=transformers turns the model on)"
    return True, f"GENERATOR={settings.GENERATOR}"


def train_adapters(say: Callable[[str], None] = print, max_steps: int | None = None, wait_for_training: bool = False) -> dict[str, Any]:
    """Queue one adapter training per demo expert (grounded examples first); returns what was queued or skipped.

    An expert is skipped when a version already trained on its current examples exists (whatever the
    gate said: rerunning would give the same adapter). Trainings run one after another on the
    worker; each activates its adapter only if it beats the base model (``activate_if_better``).
    ``max_steps`` caps each training (``DEMO_ADAPTER_STEPS``; 0: the training's epochs decide).
    """
    from experts.models import Expert

    agencies = json.loads((Path(settings.DEMO_DIR) / "agencies.json").read_text())
    experts = list(Expert.objects.filter(slug__in=agencies).order_by("slug"))
    steps = settings.DEMO_ADAPTER_STEPS if max_steps is None else max_steps
    summary: dict[str, Any] = {}
    say("building grounded training examples for each expert")
    for expert in experts:
        job = wait(labeling_services.enqueue_grounded_examples(expert), say)
        summary[expert.slug] = {"examples": job.result}
    jobs = []
    for expert in experts:
        fingerprint = expert_services.data_fingerprint(expert)
        done = expert.versions.filter(data_fingerprint=fingerprint).exclude(adapter_path="").exclude(status=VersionStatus.FAILED).first()
        if done is not None:
            say(f"  {expert.slug}: v{done.version} was trained on these examples already ({done.status}); skipped")
            summary[expert.slug]["skipped"] = f"v{done.version}"
            continue
        params = {**expert_services.default_training_params(), **({"max_steps": steps} if steps else {})}
        job = expert_services.start_adapter_training(expert, params, activate_if_better=True)
        say(f"  {expert.slug}: adapter training queued (job {job.pk}, {f'{steps} steps' if steps else 'as many steps as its epochs take'})")
        summary[expert.slug]["job"] = job.pk
        jobs.append(job)
    if wait_for_training:
        for job in jobs:
            result = wait(job, say, timeout=6 * 3600).result
            say(f"  {result['expert']}: v{result['version']} answer F1 {result.get('held_out_f1')} (base {result.get('base_held_out_f1')}), "
                + ("activated" if result.get("activated") else f"not activated ({result.get('gate') or 'no verdict'}): the base model keeps answering"))
            summary[result["expert"]]["result"] = {k: result.get(k) for k in ("version", "held_out_f1", "base_held_out_f1", "held_out_n", "gate", "activated")}
    return summary
