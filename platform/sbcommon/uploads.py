"""Storing uploaded files: safe names, written atomically, hashed on the way."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from pathlib import Path
from typing import Any


def safe_filename(name: str, default: str = "document") -> str:
    """The last component of ``name`` with anything but letters, digits, dot, dash and underscore replaced."""
    base = re.split(r"[\\/]", name or "")[-1]
    safe = re.sub(r"[^\w.-]+", "_", base).strip("._")[:100]
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
