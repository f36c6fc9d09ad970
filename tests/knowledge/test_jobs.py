"""Knowledge jobs: enqueued once per key, run by thin tasks, and a rerun does nothing new."""

from __future__ import annotations

import pytest

from jobs.models import Job
from knowledge import ingest, services, tasks
from knowledge.models import Document, KnowledgeBase

pytestmark = pytest.mark.django_db


@pytest.fixture
def indexed(kb, dmv):
    ingest.ingest_files(dmv, [("a.txt", b"Licence renewal online"), ("b.txt", b"Vehicle registration fees")])
    return dmv


def run(job: Job, task) -> Job:
    task.apply(args=[job.pk])
    job.refresh_from_db()
    return job


def test_the_same_job_is_not_enqueued_twice_while_active(indexed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        first = services.enqueue_rebuild(indexed)
        second = services.enqueue_rebuild(indexed)

    assert first.pk == second.pk
    assert Job.objects.filter(kind="rebuild_index").count() == 1


def test_rebuild_reports_its_progress_and_result(indexed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = services.enqueue_rebuild(indexed)

    job = run(job, tasks.rebuild_expert_index)

    assert (job.status, job.progress) == ("succeeded", 1.0)
    assert {k: v for k, v in job.result.items() if k != "seconds"} == {"documents": 2, "chunks": 2, "updated_after": 0}
    assert set(job.result["seconds"]) == {"chunk", "embed", "write", "sentences"}
    assert KnowledgeBase.objects.get(expert=indexed).built_at is not None


def test_a_finished_job_run_again_does_nothing(indexed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = services.enqueue_delete(Document.objects.get(external_id="a.txt"))
    run(job, tasks.delete_expert_document)

    again = run(job, tasks.delete_expert_document)

    assert again.status == "succeeded"
    assert again.result == {"document": job.params["document"], "deleted": True}
    assert Document.objects.count() == 1


def test_drop_then_index_brings_the_collection_back(indexed, kb, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        dropped = run(services.enqueue_drop(indexed), tasks.drop_expert_collection)
        indexed_again = run(services.enqueue_index(indexed), tasks.index_expert_documents)

    assert dropped.result == {"dropped_chunks": 2, "documents_pending": 2}
    assert (indexed_again.result["documents"], indexed_again.result["chunks"]) == (2, 2)
    assert set(indexed_again.result["seconds"]) == {"chunk", "embed", "write", "sentences"}
    assert kb.count("expert_dmv") == 2


def test_a_job_for_a_deleted_expert_fails_with_a_reason(indexed, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        job = services.enqueue_index(indexed)
    indexed.delete()

    job = run(job, tasks.index_expert_documents)

    assert job.status == "failed"
    assert job.error == "expert 'dmv' no longer exists"


def test_reembed_starts_a_rebuild_for_each_stale_collection(indexed, settings, django_capture_on_commit_callbacks):
    settings.EMBEDDING_MODEL = "a-newer-model"
    with django_capture_on_commit_callbacks(execute=False):
        jobs = services.enqueue_reembed_stale()

    assert [(j.kind, j.params) for j in jobs] == [("rebuild_index", {"expert": "dmv"})]


def test_an_ingest_whose_files_are_gone_fails_clearly(kb, dmv, django_capture_on_commit_callbacks):
    job = Job.objects.create(kind="ingest_documents", key="k", title="t", params={"expert": "dmv", "files": [{"path": "/nonexistent/x.txt", "name": "x.txt"}]})

    job = run(job, tasks.ingest_expert_documents)

    assert job.status == "failed"
    assert job.error == "the uploaded files are gone (already ingested, or removed); upload them again"
