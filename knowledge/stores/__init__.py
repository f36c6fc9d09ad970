"""Vector stores behind one Protocol; ``get_store()`` returns the configured one."""

from .base import Hit, PointRecord, StoreUnavailable, VectorStore
from .registry import get_store

__all__ = ["Hit", "PointRecord", "StoreUnavailable", "VectorStore", "get_store"]
