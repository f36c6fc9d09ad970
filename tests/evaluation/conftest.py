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
