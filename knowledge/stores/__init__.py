"""Vector stores behind one Protocol; ``get_store()`` returns the configured one."""

from .base import Hit, PointRecord, VectorStore, get_store

__all__ = ["Hit", "PointRecord", "VectorStore", "get_store"]
