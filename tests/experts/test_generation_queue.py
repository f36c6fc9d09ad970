"""The in-process model's queue: one generation at a time, a bounded wait in arrival order, the rest refused at once."""

from __future__ import annotations

import threading
import time

import pytest

from experts.generation import GenerationBusy, GenerationTimeout
from experts.generation.queue import GenerationQueue


def _waiter(q: GenerationQueue, order: list[int], n: int, hold: threading.Event | None = None) -> threading.Thread:
    def run() -> None:
        with q.hold(timeout_s=10):
            order.append(n)
            if hold is not None:
                hold.wait(10)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _until(condition, timeout=5.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_beyond_max_waiting_a_request_is_refused_at_once_with_a_retry_after():
    q = GenerationQueue(max_waiting=2)
    q.acquire()
    order: list[int] = []
    threads = [_waiter(q, order, n) for n in range(2)]
    _until(lambda: q.waiting == 2)
    started = time.monotonic()
    with pytest.raises(GenerationBusy) as refused:
        q.acquire(timeout_s=10)
    assert time.monotonic() - started < 0.5  # refused, not queued
    assert refused.value.retry_after_s >= 1
    q.release()
    for t in threads:
        t.join(5)
    assert order == [0, 1]  # first come, first served
    assert not q.busy
    assert q.waiting == 0


def test_a_waiter_whose_budget_runs_out_times_out_and_leaves_the_queue():
    q = GenerationQueue(max_waiting=4)
    q.acquire()
    with pytest.raises(GenerationTimeout, match="waited"):
        q.acquire(timeout_s=0.05)
    assert q.waiting == 0
    q.release()
    q.acquire(timeout_s=0.05)  # free again
    q.release()


def test_retry_after_grows_with_the_queue_and_the_measured_hold():
    q = GenerationQueue(max_waiting=4)
    for _ in range(60):
        q.release(held_s=1.9)
    assert q.retry_after_s() == 2
    q.acquire()
    gate = threading.Event()
    order: list[int] = []
    threads = [_waiter(q, order, n, gate) for n in range(3)]
    _until(lambda: q.waiting == 3)
    assert q.retry_after_s() == 8  # three waiting plus the one being served, ~1.9 s each
    q.release()
    gate.set()
    for t in threads:
        t.join(5)
