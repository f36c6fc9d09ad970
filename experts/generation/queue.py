"""A bounded queue in front of an in-process model: one generation at a time, a few waiting, the rest refused.

``GenerationQueue`` admits one holder and at most ``max_waiting`` waiters in arrival order; beyond that
``GenerationBusy`` at once (a 503 with ``Retry-After``), and a waiter out of time ``GenerationTimeout``.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager

from .base import GenerationBusy, GenerationTimeout


class GenerationQueue:
    """First come, first served access to one model for at most ``1 + max_waiting`` requests at a time."""

    def __init__(self, max_waiting: int = 4, *, clock=time.monotonic):
        self.max_waiting = max(0, int(max_waiting))
        self.clock = clock
        self._cond = threading.Condition()
        self._waiting: deque[object] = deque()
        self._busy = False
        self._mean_hold_s = 5.0  # until measured: a short answer on a small CPU model

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def busy(self) -> bool:
        return self._busy

    def retry_after_s(self) -> int:
        """Seconds until a slot is likely free: the queue ahead times the recent mean hold."""
        return max(1, math.ceil(self._mean_hold_s * (len(self._waiting) + 1)))

    def acquire(self, timeout_s: float | None = None) -> None:
        """Wait for the model (``release`` gives it back).

        Raises:
            GenerationBusy: ``max_waiting`` requests are already waiting.
            GenerationTimeout: the model was not free within ``timeout_s``.
        """
        ticket = object()
        with self._cond:
            if not self._busy and not self._waiting:
                self._busy = True
                return
            if len(self._waiting) >= self.max_waiting:
                raise GenerationBusy(f"the model is busy: {len(self._waiting)} requests are waiting already", self.retry_after_s())
            self._waiting.append(ticket)
            deadline = None if timeout_s is None else self.clock() + timeout_s
            try:
                while self._busy or self._waiting[0] is not ticket:
                    remaining = None if deadline is None else deadline - self.clock()
                    if remaining is not None and remaining <= 0:
                        raise GenerationTimeout(f"waited {timeout_s:.1f} s for the model without getting it")
                    self._cond.wait(remaining)
            finally:
                self._waiting.remove(ticket)
                self._cond.notify_all()  # the next in line may be at the head now
            self._busy = True

    def release(self, held_s: float | None = None) -> None:
        """Give the model back; ``held_s`` (how long it was used) tunes ``retry_after_s``."""
        with self._cond:
            self._busy = False
            if held_s is not None:
                self._mean_hold_s = 0.8 * self._mean_hold_s + 0.2 * max(0.0, held_s)
            self._cond.notify_all()

    @contextmanager
    def hold(self, timeout_s: float | None = None) -> Iterator[None]:
        """``acquire`` … ``release`` around a block."""
        self.acquire(timeout_s)
        t0 = self.clock()
        try:
            yield
        finally:
            self.release(self.clock() - t0)
