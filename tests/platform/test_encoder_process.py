"""The encoder in a child process: batching there, the same vectors as in-process, restarts, and sub-batches."""

from __future__ import annotations

import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from encoders import DEFAULT_MODEL, EncoderUnavailable, add_batch_listener, base, make_encoder, registry
from encoders import passes as pass_planning
from encoders.batching import MicroBatchingEncoder
from encoders.process import ProcessEncoder

TEXTS = [f"How do I renew my licence, question {i}?" for i in range(24)]


@pytest.fixture(scope="module")
def in_process():
    return make_encoder(DEFAULT_MODEL, threads=1)  # the configured backend, as the child runs it


@pytest.fixture(scope="module")
def child():
    # One child for the module: starting one imports torch and loads the model (~10 s here).
    process = ProcessEncoder(DEFAULT_MODEL, threads=1, max_batch=32, max_wait_ms=5.0)
    yield process
    process.close()


def test_concurrent_calls_share_forward_passes_in_the_child_and_get_their_own_rows(child, in_process):
    before = child.forward_passes
    barrier = threading.Barrier(len(TEXTS))

    def one(text):
        barrier.wait()
        return child.encode([text])[0]

    with ThreadPoolExecutor(len(TEXTS)) as pool:
        rows = list(pool.map(one, TEXTS))
    passes = child.forward_passes - before
    assert 1 <= passes < len(TEXTS) // 2  # batched in the child, not one pass per call
    np.testing.assert_allclose(np.stack(rows), in_process.encode(TEXTS), atol=1e-5)


def test_a_multi_text_call_gets_its_rows_in_order(child, in_process):
    np.testing.assert_allclose(child.encode(TEXTS[:5]), in_process.encode(TEXTS[:5]), atol=1e-5)
    assert child.encode([]).shape == (0, child.dimension)


def test_batch_listeners_hear_each_pass_in_the_child(child):
    sizes: list[int] = []
    add_batch_listener(sizes.append)
    try:
        child.encode(TEXTS[:3])
    finally:
        base._batch_listeners.remove(sizes.append)
    assert sizes == [3]


def test_a_killed_child_is_replaced_and_the_call_answered_on_the_new_one(child, in_process):
    starts = child.starts
    os.kill(child.pid, signal.SIGKILL)
    time.sleep(0.3)
    np.testing.assert_allclose(child.encode(TEXTS[:2]), in_process.encode(TEXTS[:2]), atol=1e-5)
    assert child.starts == starts + 1


def test_a_closed_encoder_refuses_calls_and_its_child_exits():
    process = ProcessEncoder(DEFAULT_MODEL, threads=1)
    pid = process.pid
    process.close()
    with pytest.raises(EncoderUnavailable, match="closed"):
        process.encode(["hello"])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_sub_batches_change_the_passes_not_the_vectors(in_process):
    small = make_encoder(DEFAULT_MODEL, threads=1, sub_batch=3)
    assert small.sub_batch == 3
    np.testing.assert_allclose(small.encode(TEXTS, batch_size=64), in_process.encode(TEXTS, batch_size=64), atol=1e-5)


def test_serving_processes_get_the_child_behind_the_vector_cache(monkeypatch, settings):
    made: list[dict] = []

    class FakeProcessEncoder:
        name, dimension = "fake", 4

        def __init__(self, name, threads, max_batch, max_wait_ms):
            made.append({"name": name, "threads": threads, "max_batch": max_batch, "max_wait_ms": max_wait_ms})

        def encode(self, texts, batch_size=64):
            return np.ones((len(texts), 4), dtype=np.float32)

        def close(self):
            pass

    monkeypatch.setattr(registry, "ProcessEncoder", FakeProcessEncoder)
    settings.ENCODER_PROCESS, settings.ENCODER_THREADS = True, 2
    monkeypatch.setattr(registry, "CACHE_SIZE", 100)
    monkeypatch.setattr(registry, "MAX_BATCH", 16)
    monkeypatch.setattr(registry, "MAX_WAIT_MS", 3.0)
    built = registry._build_encoder("some-model", 1)
    assert made == [{"name": "some-model", "threads": 2, "max_batch": 16, "max_wait_ms": 3.0}]
    assert isinstance(built, MicroBatchingEncoder)
    assert isinstance(built.inner, FakeProcessEncoder)
    assert built.max_batch == 1  # the child batches; this process only caches
    built.encode(["a"])
    built.encode(["a"])
    assert built.cache_hits == 1


def test_a_long_text_gets_a_pass_of_its_own_instead_of_padding_the_short_ones():
    waiting = [(0, 1, 0, "x" * 40), (1, 2, 0, "x" * 5), (2, 3, 0, "x" * 38), (3, 4, 0, "x" * 43), (4, 5, 0, "x" * 300)]
    # one pass: 100 + 5 x 300 = 1600; the four short ones, then the long one: 100 + 4 x 43 + 100 + 300 = 672
    chunk = pass_planning.next_pass(waiting, 8, pass_cost=100)
    assert [item[0] for item in chunk] == [1, 2, 0, 3]  # the oldest's run, shortest first
    assert [item[0] for item in waiting] == [4]
    assert [item[0] for item in pass_planning.next_pass(waiting, 8, pass_cost=100)] == [4]
    assert waiting == []


def test_when_passes_cost_much_everything_waiting_goes_together_up_to_the_size():
    waiting = [(i, i, 0, "x" * (10 * i + 5)) for i in range(8)]
    assert len(pass_planning.next_pass(waiting, 8, pass_cost=10_000)) == 8
    assert waiting == []
    waiting = [(i, i, 0, "x" * (10 * i + 5)) for i in range(12)]
    passes = [len(pass_planning.next_pass(waiting, 8, pass_cost=10_000)) for _ in range(2)]
    assert waiting == []
    assert max(passes) <= 8


def test_the_oldest_text_always_goes_in_the_next_pass():
    waiting = [(0, 1, 0, "x" * 200)] + [(i, i + 1, 0, "short") for i in range(1, 20)]
    assert [item[0] for item in pass_planning.next_pass(waiting, 4, pass_cost=50)] == [0]  # however unlike the others
    waiting = [(5, 1, 0, "x" * 20)] + [(i, i + 1, 0, "x" * (100 + i)) for i in range(6, 20)]
    assert 5 in {item[0] for item in pass_planning.next_pass(waiting, 4, pass_cost=50)}


def test_the_pass_cost_is_measured_positive_on_the_real_encoder(in_process):
    # A timing: on a machine busy with other work one measurement can come out 0 ("nothing measurable");
    # three tries of the fastest of three runs each find the fixed cost a quiet machine shows every time.
    costs = [pass_planning.measure_pass_cost(in_process, repeats=3) for _ in range(3)]
    assert all(0 <= c <= 10_000 for c in costs)
    assert max(costs) > 0


def test_a_multi_text_call_spanning_passes_is_answered_once_all_its_texts_are_done(child, in_process):
    texts = [f"{'word ' * (i % 7)}question {i} about licences" for i in range(19)]  # more than two passes of 8
    sizes: list[int] = []
    add_batch_listener(sizes.append)
    try:
        rows = child.encode(texts)
    finally:
        base._batch_listeners.remove(sizes.append)
    assert sum(sizes) == len(texts)
    assert max(sizes) <= 8
    assert len(sizes) >= 3
    np.testing.assert_allclose(rows, in_process.encode(texts), atol=1e-5)


def test_encode_later_sends_now_and_waits_when_asked(child, in_process):
    before = child.forward_passes
    wait = child.encode_later([TEXTS[0]])
    deadline = time.monotonic() + 30
    while child.forward_passes == before and time.monotonic() < deadline:
        time.sleep(0.01)  # the child encodes while this thread does something else
    assert child.forward_passes == before + 1
    np.testing.assert_allclose(wait(), in_process.encode([TEXTS[0]]), atol=1e-5)

