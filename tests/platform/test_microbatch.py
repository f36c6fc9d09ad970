"""The micro-batching encoder: concurrent one-text calls share forward passes, with unchanged results."""

from __future__ import annotations

import hashlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from encoders.batching import MicroBatchingEncoder
from encoders.onnx_encoder import OnnxEncoder
from encoders.torch_encoder import SentenceTransformerEncoder


class CountingEncoder:
    """A stand-in model: deterministic vectors per text, a fixed cost per pass, and a pass log."""

    name = "counting"
    dimension = 8

    def __init__(self, delay: float = 0.02, fail_on: str | None = None):
        self.delay = delay
        self.fail_on = fail_on
        self.passes: list[int] = []
        self._lock = threading.Lock()

    def vector(self, text: str) -> np.ndarray:
        digest = hashlib.sha256(text.encode()).digest()[: self.dimension]
        v = np.frombuffer(digest, dtype=np.uint8).astype(np.float32) + 1
        return v / np.linalg.norm(v)

    def encode(self, texts, batch_size=64):
        with self._lock:
            time.sleep(self.delay)
            self.passes.append(len(texts))
        if self.fail_on is not None and self.fail_on in texts:
            raise RuntimeError("model exploded")
        return np.stack([self.vector(t) for t in texts])


def _concurrently(encoder, texts: list[str]) -> list[np.ndarray]:
    barrier = threading.Barrier(len(texts))

    def one(text):
        barrier.wait()
        return encoder.encode([text])[0]

    with ThreadPoolExecutor(len(texts)) as pool:
        return list(pool.map(one, texts))


def test_concurrent_single_calls_share_forward_passes_and_get_their_own_rows():
    inner = CountingEncoder()
    batched = MicroBatchingEncoder(inner, max_batch=32, max_wait_ms=5)
    texts = [f"question {i}" for i in range(16)]
    rows = _concurrently(batched, texts)
    batched.close()
    assert sum(inner.passes) == 16
    assert len(inner.passes) <= 4, inner.passes  # 16 callers, a handful of passes, not 16
    assert max(inner.passes) >= 4
    for text, row in zip(texts, rows, strict=True):
        np.testing.assert_array_equal(row, inner.vector(text))


def test_a_batch_never_exceeds_max_batch():
    inner = CountingEncoder(delay=0.03)
    batched = MicroBatchingEncoder(inner, max_batch=4, max_wait_ms=20)
    _concurrently(batched, [f"q{i}" for i in range(12)])
    batched.close()
    assert max(inner.passes) <= 4
    assert sum(inner.passes) == 12


def test_multi_text_calls_bypass_the_batcher():
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=32, max_wait_ms=5)
    out = batched.encode(["a", "b", "c"])
    assert inner.passes == [3]
    assert batched.forward_passes == 0
    assert batched._thread is None
    assert out.shape == (3, 8)


def test_an_exception_reaches_every_caller_of_the_failed_pass_and_the_batcher_survives():
    inner = CountingEncoder(delay=0.05, fail_on="boom")
    batched = MicroBatchingEncoder(inner, max_batch=32, max_wait_ms=30)
    barrier = threading.Barrier(3)
    outcomes: dict[str, object] = {}

    def one(text):
        barrier.wait()
        try:
            outcomes[text] = batched.encode([text])
        except RuntimeError as exc:
            outcomes[text] = exc

    threads = [threading.Thread(target=one, args=(t,)) for t in ("boom", "x", "y")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(5)
    failed = [t for t, o in outcomes.items() if isinstance(o, RuntimeError)]
    assert "boom" in failed
    # The batcher lives on: the next call is answered.
    np.testing.assert_array_equal(batched.encode(["after"])[0], inner.vector("after"))
    batched.close()


def test_close_stops_the_thread_and_later_calls_still_work():
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=8, max_wait_ms=1)
    batched.encode(["warm"])
    thread = batched._thread
    assert thread is not None
    assert thread.is_alive()
    batched.close()
    assert not thread.is_alive()
    np.testing.assert_array_equal(batched.encode(["late"])[0], inner.vector("late"))
    assert batched._thread is thread  # no new thread after close


def test_the_cache_answers_repeated_texts_without_a_forward_pass_and_stays_bounded():
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=1, cache_size=2)
    batched.encode(["a", "b"])
    batched.encode(["a", "b"])
    assert inner.passes == [2]
    batched.encode(["c"])  # evicts the least recently used ("a")
    batched.encode(["a"])
    assert inner.passes == [2, 1, 1]
    assert len(batched._cache) == 2


def test_real_encoder_batched_vectors_equal_unbatched(encoder):
    inner = encoder.inner if isinstance(encoder, MicroBatchingEncoder) else encoder
    assert isinstance(inner, (SentenceTransformerEncoder, OnnxEncoder))  # the configured backend's bare encoder
    texts = ["How do I renew my driver license?", "When can I claim retirement benefits?",
             "student loan forgiveness", "VA disability compensation rates for 2024 and how to apply online"]
    batched = MicroBatchingEncoder(inner, max_batch=8, max_wait_ms=50)
    rows = _concurrently(batched, texts)
    batched.close()
    assert batched.forward_passes < len(texts)
    for text, row in zip(texts, rows, strict=True):
        np.testing.assert_allclose(row, inner.encode([text])[0], atol=1e-5)


@pytest.mark.parametrize("wait_ms", [0, 2])
def test_a_lone_call_waits_at_most_about_max_wait(wait_ms):
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=32, max_wait_ms=wait_ms)
    batched.encode(["warm"])
    t0 = time.perf_counter()
    batched.encode(["alone"])
    elapsed_ms = (time.perf_counter() - t0) * 1000
    batched.close()
    assert elapsed_ms < wait_ms + 500  # generous: the machine is shared; the point is no blocking wait


def test_bulk_calls_skip_the_cache():
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=8, cache_size=1000)
    texts = [f"doc {i}" for i in range(batched.BULK_TEXTS + 1)]
    batched.encode(texts)
    assert len(batched._cache) == 0
    assert inner.passes == [len(texts)]


def test_encoder_threads_default_to_torch_threads_and_apply_once_the_batcher_runs(monkeypatch, settings):
    import torch

    from encoders import registry

    settings.ENCODER_THREADS = 0
    settings.TORCH_THREADS = 1
    assert registry.serving_threads() == 1
    settings.ENCODER_THREADS = 3
    assert registry.serving_threads() == 3
    settings.ENCODER_THREADS = -1
    assert registry.serving_threads() == registry.cpu_count()
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    batched = MicroBatchingEncoder(CountingEncoder(delay=0.0), max_wait_ms=0.5, batch_threads=2)
    try:
        batched.encode(["one text"])
    finally:
        batched.close()
    assert calls == [2]


def test_encode_later_queues_now_and_remembers_the_vector():
    inner = CountingEncoder(delay=0.0)
    batched = MicroBatchingEncoder(inner, max_batch=8, max_wait_ms=1.0, cache_size=10)
    try:
        wait = batched.encode_later(["renew my licence"])
        deadline = time.monotonic() + 5
        while not inner.passes and time.monotonic() < deadline:
            time.sleep(0.005)  # the batcher thread encodes before anyone waits
        assert inner.passes == [1]
        np.testing.assert_allclose(wait()[0], inner.vector("renew my licence"))
        np.testing.assert_allclose(batched.encode_later(["renew my licence"])()[0], inner.vector("renew my licence"))
        assert (inner.passes, batched.cache_hits) == ([1], 1)  # the second came from the cache
    finally:
        batched.close()


def test_encode_later_without_a_batcher_encodes_when_asked():
    inner = CountingEncoder(delay=0.0)
    cached = MicroBatchingEncoder(inner, max_batch=1, cache_size=10)
    wait = cached.encode_later(["a", "b"])
    assert inner.passes == []
    assert wait().shape == (2, 8)
    single = cached.encode_later(["c"])
    np.testing.assert_allclose(single()[0], inner.vector("c"))
    assert cached.encode(["c"]).shape == (1, 8)
    assert (inner.passes, cached.cache_hits) == ([2, 1], 1)


def test_a_bulk_call_reuses_cached_vectors_and_encodes_each_other_text_once():
    inner = CountingEncoder(delay=0)
    batched = MicroBatchingEncoder(inner, max_batch=8, cache_size=1000)
    seen = batched.encode(["sentence 0", "sentence 1"])
    texts = [f"sentence {i % 300}" for i in range(batched.BULK_TEXTS + 50)]
    vectors = batched.encode(texts)
    assert inner.passes == [2, 298]  # the two cached texts are not encoded again, the repeated ones once
    np.testing.assert_array_equal(vectors[:2], seen)
    np.testing.assert_array_equal(vectors[300], vectors[0])
    assert len(batched._cache) == 2  # a bulk call remembers nothing
    assert (batched.cache_hits, batched.cache_misses) == (0, 2)  # nor counts as serving's hits and misses


def test_lone_calls_one_after_another_never_hang_the_batcher():
    """The batcher's wait for a call to join the first must end. ``queue.SimpleQueue.get`` with a timeout that has
    passed by the time it re-checks waits forever on CPython 3.11/3.12 (its lock is re-acquired with a negative
    timeout): a lone request then hung until the next one arrived, and an evaluation asking one question at a time
    hung for good."""
    batched = MicroBatchingEncoder(CountingEncoder(delay=0.0), max_batch=32, max_wait_ms=0.002)
    calls = threading.Thread(target=lambda: [batched.encode([f"question {i}"]) for i in range(20000)], daemon=True)
    calls.start()
    calls.join(60)
    hung = calls.is_alive()
    batched.close(timeout=0.1)
    assert not hung, "a lone encode waited on the batcher for good"
