"""Shared fixtures of the evaluation tests."""

import pytest

from tests.support.hashing_encoder import HashingEncoder


@pytest.fixture
def hashing(tmp_path, monkeypatch, settings):
    """The hashing encoder wherever an encoder is asked for, its embeddings cached in tmp_path."""
    monkeypatch.setenv("EMBEDDING_DISK_CACHE", str(tmp_path / "cache" / "embeddings"))
    encoder = HashingEncoder()
    monkeypatch.setattr("encoders.get_encoder", lambda *a, **k: encoder)
    settings.EMBEDDING_MODEL = encoder.name
    return encoder


@pytest.fixture(autouse=True)
def slow_evaluations_keep_their_vectors(request, settings, monkeypatch, tmp_path):
    """The slow evaluations run in place with the product's vector cache on disk (``EMBEDDING_DISK_CACHE``) in the
    evaluations' cache folder, as ``manage.py evaluate``'s workspaces do: a dataset's second load embeds nothing again.

    Each gets a fresh vector store, as a workspace does: the database is emptied between them, and an expert made
    again under an earlier test's slug would otherwise find that test's collection, points and all."""
    if request.node.get_closest_marker("slow") is None:
        yield
        return
    from encoders import registry
    from evaluation.datasets import embedding_cache_dir
    from knowledge.stores import get_store

    settings.EMBEDDING_DISK_CACHE = str(embedding_cache_dir())
    monkeypatch.setattr(registry, "_encoders", {})  # encoders made before this test have no disk cache
    settings.QDRANT_URL, settings.QDRANT_PATH = "", str(tmp_path / "qdrant")
    get_store.cache_clear()
    yield
    get_store().close()
    get_store.cache_clear()
