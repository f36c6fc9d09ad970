"""Uploaded files: refusing them (``UploadRejected``, ``check_size``), safe names, stored atomically and hashed on the way.

The knowledge (documents) and labeling (query logs) apps both take uploads; each checks what its own
files must contain, and both refuse with the one ``UploadRejected`` (re-exported by their ``services``).
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import uuid
from pathlib import Path
from typing import Any


class UploadRejected(ValueError):
    """An uploaded file refused before it is stored, with the HTTP status that says why (413: too large, else 400)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def check_size(size: int, limit: int, name: str = "") -> None:
    """Refuse a file of ``size`` bytes over ``limit`` (413) or empty (400); ``name`` says which file, if given."""
    if size > limit:
        raise UploadRejected(f"{name or 'the file'} is {size:,} bytes; the limit is {limit:,} bytes", status=413)
    if size == 0:
        raise UploadRejected(f"{name}: the file is empty" if name else "the file is empty")


# Multipart framing around the files (part headers, boundaries): allowed on top of a size limit.
MULTIPART_SLACK = 64 * 1024


def declared_over_limit(meta: dict[str, Any], limit: int) -> int | None:
    """The request's declared body size when it exceeds ``limit`` plus the framing, else None.

    Checked from the headers (``request.META``) before the body is read, let alone stored; a missing
    or garbled Content-Length counts as 0 (the per-file checks still apply).
    """
    try:
        length = int(meta.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    return length if length > limit + MULTIPART_SLACK else None


# Names Windows reserves for devices, whatever the extension (CON.txt is the console too).
RESERVED_NAMES = frozenset({"con", "prn", "aux", "nul", *(f"com{i}" for i in range(10)), *(f"lpt{i}" for i in range(10))})


def safe_filename(name: str, default: str = "document") -> str:
    """A file name safe on any file system and in any page.

    The last path component of ``name`` (either slash), normalised (NFKC folds look-alike slashes and
    dots), with anything but letters, digits, dot, dash and underscore replaced, no leading dots,
    at most 100 characters keeping the extension, and never a device name such as ``CON`` or ``NUL``.
    """
    normalised = unicodedata.normalize("NFKC", name or "")
    base = re.split(r"[\\/]", normalised)[-1]
    safe = re.sub(r"[^\w.-]+", "_", base).strip("._")  # \w excludes control and format characters (RLO, zero-width)
    if len(safe) > 100:
        stem, dot, suffix = safe.rpartition(".")
        safe = f"{stem[: 99 - len(suffix)]}.{suffix}" if dot and 0 < len(suffix) <= 10 else safe[:100]
    if safe.split(".")[0].lower() in RESERVED_NAMES:
        safe = f"_{safe}"
    return safe or default


def save_upload(upload: Any, folder: Path, default_name: str = "upload") -> tuple[Path, str]:
    """Store a Django upload as ``folder/<uuid>-<safe name>`` atomically; returns (path, SHA-256).

    The file is written under a temporary name, synced, then renamed: a job never sees half a file.
    """
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{uuid.uuid4().hex}-{safe_filename(upload.name, default_name)}"
    partial = folder / f".{final.name}.part"
    digest = hashlib.sha256()
    upload.seek(0)
    try:
        with open(partial, "wb") as out:
            for chunk in upload.chunks():
                digest.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, final)
    finally:
        partial.unlink(missing_ok=True)
    return final, digest.hexdigest()
