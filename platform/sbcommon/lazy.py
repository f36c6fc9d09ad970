"""One object a process, made on first use."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class ProcessSingleton(Generic[T]):
    """The object ``make()`` returns, made once a process on the first ``get()``.

    Threads that ask together get the same one (double-checked under a lock); once it is made, ``get``
    takes no lock. ``value`` is None until then, and after ``reset()``.
    """

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self.value: T | None = None

    def get(self) -> T:
        value = self.value
        if value is None:
            with self._lock:
                if self.value is None:
                    self.value = self._make()
                value = self.value
        return value

    def reset(self) -> None:
        """Forget the object: the next ``get()`` makes a new one."""
        with self._lock:
            self.value = None
