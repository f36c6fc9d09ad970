"""The knowledge jobs the console, the API and the schedules start: uploads, indexing, rebuilds, deletions.

Each enqueues one Celery task of ``knowledge.tasks`` (one active job per key: ``jobs.services.enqueue_once``);
the work itself is done by ``knowledge.ingest`` and ``knowledge.indexing``.
"""

from __future__ import annotations

import hashlib
from typing import Any

from django.db import transaction

from encoders import embedding_space
from experts.models import Expert
from jobs.models import Job
from jobs.services import enqueue_once
from sbcommon.uploads import UploadRejected, safe_filename

from .ingest import check_upload, max_upload_bytes, save_upload
from .models import Document, KnowledgeBase
from .points import CHUNK_SIZE_RANGE

MAX_FILES_PER_UPLOAD = 100


def accept_uploads(expert: Expert, uploads: list[Any], user: Any = None) -> Job:
    """Check every file, store them, and enqueue one ingest job; nothing is stored if any file is refused.

    The same files again give the same active job (the key is their hashes).

    Raises:
        UploadRejected: no files, too many, too large (413), empty, or of a kind we cannot read.
    """
    from . import tasks

    if not uploads:
        raise UploadRejected("choose at least one file")
    if len(uploads) > MAX_FILES_PER_UPLOAD:
        raise UploadRejected(f"{len(uploads)} files in one upload; the limit is {MAX_FILES_PER_UPLOAD}")
    total = sum(int(getattr(u, "size", 0) or 0) for u in uploads)
    if total > max_upload_bytes():
        raise UploadRejected(f"the files add up to {total:,} bytes; the limit is {max_upload_bytes():,} bytes", status=413)
    for upload in uploads:
        check_upload(upload)
    stored = [(*save_upload(u), safe_filename(u.name)) for u in uploads]
    key = hashlib.sha256("|".join(sorted(f"{name}:{digest}" for _, digest, name in stored)).encode()).hexdigest()[:32]
    names = ", ".join(name for _, _, name in stored)
    job = enqueue_once(
        "ingest_documents", f"ingest:{expert.slug}:{key}", f"Add {names[:180]} to {expert.name}"[:255], tasks.ingest_expert_documents,
        {"expert": expert.slug, "files": [{"path": str(p), "name": name, "sha256": digest} for p, digest, name in stored]}, user,
    )
    if [f["path"] for f in job.params.get("files", [])] != [str(p) for p, _, _ in stored]:
        for path, _, _ in stored:  # the same files are already being ingested
            path.unlink(missing_ok=True)
    return job


@transaction.atomic
def update_chunking(expert: Expert, size: int, overlap: int, user: Any = None) -> Job | None:
    """Change the expert's chunk size and overlap; a rebuild job re-chunks the collection (``None`` if nothing changed)."""
    if not CHUNK_SIZE_RANGE[0] <= size <= CHUNK_SIZE_RANGE[1]:
        raise ValueError(f"chunk size must be between {CHUNK_SIZE_RANGE[0]} and {CHUNK_SIZE_RANGE[1]} characters")
    if not 0 <= overlap < size // 2:
        raise ValueError("chunk overlap must be at least 0 and less than half the chunk size")
    if (expert.chunk_size, expert.chunk_overlap) == (size, overlap):
        return None
    Expert.objects.filter(pk=expert.pk).update(chunk_size=size, chunk_overlap=overlap)
    expert.chunk_size, expert.chunk_overlap = size, overlap
    if not Document.objects.filter(expert=expert).exists():
        return None
    return enqueue_rebuild(expert, user)


def enqueue_index(expert: Expert, user: Any = None) -> Job:
    """Index the expert's pending documents (one active job per expert)."""
    from . import tasks

    return enqueue_once("index_documents", f"index:{expert.slug}", f"Index {expert.name} documents", tasks.index_expert_documents, {"expert": expert.slug}, user)


def enqueue_rebuild(expert: Expert, user: Any = None) -> Job:
    """Rebuild the expert's collection behind its alias/pointer (re-chunks and re-embeds everything)."""
    from . import tasks

    return enqueue_once("rebuild_index", f"rebuild:{expert.slug}", f"Rebuild {expert.name} knowledge base", tasks.rebuild_expert_index, {"expert": expert.slug}, user)


def enqueue_reembed_stale(user: Any = None) -> list[Job]:
    """A rebuild job for every expert whose collection was built with another embedding model."""
    return [enqueue_rebuild(kb.expert, user) for kb in KnowledgeBase.objects.select_related("expert").exclude(embedding_model=embedding_space())]


def enqueue_delete(document: Document, user: Any = None) -> Job:
    from . import tasks

    return enqueue_once(
        "delete_document", f"delete_document:{document.pk}", f"Delete {document.title[:200]}", tasks.delete_expert_document,
        {"expert": document.expert.slug, "document": document.pk}, user,
    )


def enqueue_drop(expert: Expert, user: Any = None) -> Job:
    from . import tasks

    return enqueue_once("drop_collection", f"drop:{expert.slug}", f"Drop {expert.name} collection", tasks.drop_expert_collection, {"expert": expert.slug}, user)
