"""Documents into an expert's knowledge base: uploads checked and stored, files parsed into versioned documents.

Documents are versioned by the hash of their text: the same file again changes nothing, a changed one
becomes a new version that waits for indexing (``knowledge.indexing``); until it is indexed, the
previous version's chunks keep serving.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from experts.models import Expert
from jobs.services import JobReporter
from sbcommon import uploads
from sbcommon.hashing import text_hash
from sbcommon.uploads import UploadRejected, check_size, safe_filename

from .indexing import index_pending
from .models import Document
from .parsers import SNIFF_BYTES, DocumentInput, ParseError, parse_bytes, sniff


def max_upload_bytes() -> int:
    """The largest upload accepted (setting ``DOCUMENT_UPLOAD_MAX_BYTES``), all files of a request together."""
    return settings.DOCUMENT_UPLOAD_MAX_BYTES


@transaction.atomic
def upsert_document(expert: Expert, doc: DocumentInput) -> tuple[Document, bool]:
    """Store a document version; returns (document, changed). Same content → nothing changes."""
    if not doc.text.strip():
        raise ValueError(f"document {doc.external_id!r} has no text")
    digest = text_hash(doc.text)
    title = doc.title[:500] or doc.external_id
    existing = Document.objects.select_for_update().filter(expert=expert, external_id=doc.external_id).first()
    if existing is not None and existing.content_hash == digest:
        return existing, False
    if existing is None:
        document = Document.objects.create(
            expert=expert, external_id=doc.external_id, title=title, url=doc.url, content_hash=digest, text=doc.text, metadata=doc.metadata or {},
        )
    else:
        # The new version waits for indexing; the old version's chunks serve until it is swapped in.
        existing.title, existing.url, existing.text = title, doc.url, doc.text
        existing.content_hash, existing.metadata = digest, doc.metadata or {}
        existing.version += 1
        existing.indexed_at = None
        existing.index_error = ""
        existing.save()
        document = existing
    return document, True


# --- uploads -------------------------------------------------------------------------------------

def _read_head(upload: Any) -> bytes:
    upload.seek(0)
    head = upload.read(SNIFF_BYTES)
    upload.seek(0)
    return head


def check_upload(upload: Any) -> str:
    """Refuse a file that is too large, empty or of a kind we cannot read, before storing it; returns its kind."""
    name = safe_filename(getattr(upload, "name", "") or "")
    check_size(int(getattr(upload, "size", 0) or 0), max_upload_bytes(), name)
    try:
        return sniff(_read_head(upload), name, complete=False)
    except ParseError as exc:
        raise UploadRejected(f"{name}: {exc}") from exc


def save_upload(upload: Any) -> tuple[Path, str]:
    """Store an upload under ``VAR_DIR/uploads/knowledge/`` atomically; returns (path, SHA-256)."""
    return uploads.save_upload(upload, Path(settings.VAR_DIR) / "uploads" / "knowledge", default_name="document")


# --- files ---------------------------------------------------------------------------------------

@dataclass
class IngestReport:
    """What an ingest did, file by file, and what indexing did after it."""

    files: list[dict[str, Any]] = field(default_factory=list)
    indexing: dict[str, Any] = field(default_factory=dict)
    parse_s: float = 0.0  # reading the files and storing their documents

    @property
    def created(self) -> int:
        return sum(f.get("created", 0) for f in self.files)

    @property
    def updated(self) -> int:
        return sum(f.get("updated", 0) for f in self.files)

    @property
    def unchanged(self) -> int:
        return sum(f.get("unchanged", 0) for f in self.files)

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [f for f in self.files if f.get("error")]

    def as_dict(self) -> dict[str, Any]:
        return {
            "files": self.files, "created": self.created, "updated": self.updated, "unchanged": self.unchanged,
            "failed_files": len(self.failed), "indexing": self.indexing, "parse_s": round(self.parse_s, 2),
        }


def ingest_file(expert: Expert, name: str, data: bytes, external_id: str | None = None) -> dict[str, Any]:
    """Parse one file and store its documents; returns the file's line of the report (never raises ``ParseError``)."""
    name = safe_filename(name)
    outcome: dict[str, Any] = {"file": name, "created": 0, "updated": 0, "unchanged": 0, "documents": []}
    try:
        parsed = parse_bytes(data, name, external_id=external_id)
    except ParseError as exc:
        outcome["error"] = str(exc)
        return outcome
    outcome["kind"] = parsed.kind
    if parsed.errors:
        outcome["skipped_lines"] = parsed.errors[:50]
    with transaction.atomic():  # one commit for the file's documents
        for doc in parsed.documents:
            document, changed = upsert_document(expert, doc)
            state = "unchanged" if not changed else ("created" if document.version == 1 else "updated")
            outcome[state] += 1
            outcome["documents"].append({"id": document.pk, "title": document.title, "version": document.version, "state": state})
    return outcome


def ingest_files(expert: Expert, files: Iterable[tuple[str, bytes | Path]], reporter: JobReporter | None = None, index: bool = True) -> IngestReport:
    """Parse and store each (name, bytes or path), then index what changed.

    A file that cannot be parsed is reported and skipped; the others go on. Indexing happens once,
    after all files, in batches (see ``index_pending``).
    """
    reporter = reporter or JobReporter()
    files = list(files)
    report = IngestReport()
    started = time.perf_counter()
    for i, (name, source) in enumerate(files, start=1):
        data = Path(source).read_bytes() if isinstance(source, Path) else source
        outcome = ingest_file(expert, name, data)
        report.files.append(outcome)
        if outcome.get("error"):
            reporter.log(f"{outcome['file']}: {outcome['error']}")
        reporter.progress(0.3 * i / len(files), f"read {i}/{len(files)} files")
    report.parse_s = time.perf_counter() - started
    if index and (report.created or report.updated or Document.objects.filter(expert=expert, indexed_at__isnull=True).exists()):
        report.indexing = index_pending(expert, _Scaled(reporter, 0.3, 1.0))
    return report


class _Scaled(JobReporter):
    """Passes progress on to ``inner`` mapped into [start, end] (ingest reads files first, then indexes)."""

    def __init__(self, inner: JobReporter, start: float, end: float):
        super().__init__(inner.job_id)
        self.inner, self.start, self.end = inner, start, end

    def progress(self, fraction: float, message: str = "") -> None:
        self.inner.progress(self.start + (self.end - self.start) * fraction, message)

    def log(self, line: str) -> None:
        self.inner.log(line)


def walk_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files named by ``paths``, folders walked in name order (hidden files skipped)."""
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(p for p in sorted(path.rglob("*")) if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
        else:
            out.append(path)
    return out
