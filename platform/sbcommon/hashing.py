"""Content hashes used for idempotent imports and caches."""

from __future__ import annotations

import hashlib


def text_hash(text: str) -> str:
    """SHA-256 hex digest of a text, after normalising surrounding whitespace."""
    return hashlib.sha256(text.strip().encode("utf-8")).hexdigest()

