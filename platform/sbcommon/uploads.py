"""Storing uploaded files: safe names, written atomically, hashed on the way."""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
import uuid
from pathlib import Path
from typing import Any

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
