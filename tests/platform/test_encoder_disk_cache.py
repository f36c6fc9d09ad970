"""The vector cache on disk (``EMBEDDING_DISK_CACHE``): bulk calls embed only new text, across processes' restarts."""

from __future__ import annotations

import numpy as np

from encoders import registry
from encoders.disk_cache import BULK_MIN_TEXTS, DiskCachedEncoder
from tests.support.hashing_encoder import HashingEncoder


class Counting(HashingEncoder):
    def __init__(self):
        super().__init__()
        self.texts: list[str] = []

    def encode(self, texts, batch_size=64):
        self.texts.extend(texts)
        return super().encode(texts, batch_size)


TEXTS = [f"passage {i} about renewing licence number {i}" for i in range(40)]


def test_a_reload_embeds_only_the_texts_it_has_not_seen_and_returns_the_same_vectors(tmp_path):
    first = DiskCachedEncoder(Counting(), tmp_path, "model-a")
    vectors = first.encode(TEXTS + TEXTS[:5])  # repeats inside a call are encoded once
    assert len(first.inner.texts) == len(TEXTS)
    first.close()

    again = DiskCachedEncoder(Counting(), tmp_path, "model-a")  # a new process: only the file is shared
    more = [*TEXTS, "a new passage nobody embedded", *[f"another new one {i}" for i in range(3)]]
    second = again.encode(more)
    assert again.inner.texts == more[len(TEXTS):]
    np.testing.assert_array_equal(second[: len(TEXTS)], vectors[: len(TEXTS)])
    np.testing.assert_allclose(second, HashingEncoder().encode(more), rtol=1e-6)
    assert (again.disk_hits, again.disk_misses) == (len(TEXTS), 4)


def test_another_embedding_space_never_reads_these_vectors(tmp_path):
    DiskCachedEncoder(Counting(), tmp_path, "model-a").encode(TEXTS)
    other = DiskCachedEncoder(Counting(), tmp_path, "model-a+onnx-int8")
    other.encode(TEXTS)
    assert len(other.inner.texts) == len(TEXTS)


def test_serving_sized_calls_never_reach_the_disk(tmp_path):
    cached = DiskCachedEncoder(Counting(), tmp_path, "model-a")
    cached.encode(["What is my question?"])
    cached.encode(TEXTS[:BULK_MIN_TEXTS])
    assert (cached.disk_hits, cached.disk_misses) == (0, 0)
    assert cached._db().execute("SELECT COUNT(*) FROM vectors").fetchone() == (0,)


def test_the_setting_wraps_the_process_encoder(settings, tmp_path, monkeypatch):
    settings.EMBEDDING_DISK_CACHE = str(tmp_path / "vectors")
    monkeypatch.setattr(registry, "_encoders", {})
    monkeypatch.setattr(registry, "_build_encoder", lambda name, threads: Counting())
    encoder = registry.get_encoder("test-model", threads=1)
    assert isinstance(encoder, DiskCachedEncoder)
    assert encoder.dimension == HashingEncoder().dimension
    encoder.encode(TEXTS)
    assert list((tmp_path / "vectors").glob("*.sqlite3"))
