"""sbcommon.lazy.ProcessSingleton: one object a process, made on first use, even by threads asking together."""

from __future__ import annotations

import threading
import time

from sbcommon.lazy import ProcessSingleton


def test_it_makes_the_object_once_for_threads_that_ask_together():
    made: list[object] = []

    def make() -> object:
        time.sleep(0.05)  # long enough for every thread to reach the lock before the first has made it
        made.append(object())
        return made[-1]

    single = ProcessSingleton(make)
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(single.get())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(made) == 1
    assert got == made * 8
    assert single.value is made[0]


def test_reset_forgets_it_and_the_next_get_makes_another():
    single = ProcessSingleton(list)
    first = single.get()
    assert single.get() is first
    single.reset()
    assert single.value is None
    assert single.get() is not first
