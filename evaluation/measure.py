"""Wall time and peak resident memory of a block of code, for benchmarks. Pure: no Django.

The larger of the kernel's ``VmHWM`` (reset through ``/proc/self/clear_refs``) and a thread sampling
``VmRSS``, relative to the resident size before the block: ``peak_mb`` is the block's extra memory.
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass
from pathlib import Path

CLEAR_REFS = Path("/proc/self/clear_refs")


def status_kb(field: str, pid: int | str = "self") -> int | None:
    """One kB field of a process's ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``); None when it cannot be read."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_high_water_mark() -> bool:
    try:
        CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Measurement:
    """Seconds and peak extra resident MiB of one measured block."""

    wall_s: float = 0.0
    peak_mb: float = 0.0


class measure:
    """``with measure() as m: ...`` then read ``m.wall_s`` and ``m.peak_mb``."""

    interval = 0.005  # seconds between RSS samples of the sampling thread

    def __init__(self) -> None:
        self.result = Measurement()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.is_set():
            self._peak_kb = max(self._peak_kb, status_kb("VmRSS") or 0)
            self._stop.wait(self.interval)

    def __enter__(self) -> Measurement:
        gc.collect()
        self._hwm = _reset_high_water_mark()
        self._baseline_kb = self._peak_kb = status_kb("VmRSS") or 0
        self._thread.start()
        self._start = time.perf_counter()
        return self.result

    def __exit__(self, *exc: object) -> None:
        self.result.wall_s = round(time.perf_counter() - self._start, 3)
        self._stop.set()
        self._thread.join()
        peak = max(self._peak_kb, status_kb("VmHWM") or 0) if self._hwm else self._peak_kb
        self.result.peak_mb = round(max(0, peak - self._baseline_kb) / 1024.0, 1)
