"""The configured vector store (the Protocol and its records are in ``base``, each backend in its own module)."""

from __future__ import annotations

from functools import lru_cache

from .base import VectorStore


@lru_cache(maxsize=1)
def get_store() -> VectorStore:
    """The store from settings: a Qdrant server when ``QDRANT_URL`` is set, else Qdrant Edge in ``QDRANT_PATH``."""
    from django.conf import settings

    if settings.QDRANT_URL:
        from .qdrant_server import ServerQdrantStore

        return ServerQdrantStore(settings.QDRANT_URL, api_key=settings.QDRANT_API_KEY or None)
    from .edge import EdgeQdrantStore

    return EdgeQdrantStore(settings.QDRANT_PATH, pointer_ttl_s=settings.QDRANT_POINTER_TTL_S)
