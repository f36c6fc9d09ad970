"""Fault injection for soak runs and fault tests: make a named part fail on a schedule, in a live server.

Off unless ``SWITCHBOARD_FAULTS_FILE`` names a JSON file mapping a fault to its spec, re-read when it
changes, e.g. ``{"generator": {"mode": "error", "experts": ["tax"], "until": 1767225600.0}}``. ``mode``
is ``error``/``down`` (raise) or ``slow`` (sleep ``delay_s``); ``experts`` narrows it, ``until`` ends it.
A hook costs one ``os.stat`` when the file is set and nothing when it is not.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

ENV_VAR = "SWITCHBOARD_FAULTS_FILE"
_lock = threading.Lock()
_cache: dict[str, Any] = {"path": None, "mtime": None, "faults": {}}


def _load() -> dict[str, dict[str, Any]]:
    """The faults in the file, re-read when it changes; ``{}`` when injection is off or the file is unreadable."""
    path = os.environ.get(ENV_VAR, "")
    if not path:
        return {}
    try:
        mtime = os.stat(path).st_mtime_ns
    except OSError:
        return {}
    with _lock:
        if _cache["path"] == path and _cache["mtime"] == mtime:
            return _cache["faults"]
        try:
            faults = json.loads(Path(path).read_text() or "{}")
        except (OSError, ValueError):
            logger.warning("faults.file_unreadable")
            faults = {}
        _cache.update(path=path, mtime=mtime, faults=faults if isinstance(faults, dict) else {})
        return _cache["faults"]


def active(name: str, expert: str | None = None) -> dict[str, Any] | None:
    """The spec of fault ``name`` if it applies now (and to ``expert``, when the fault names experts), else ``None``."""
    spec = _load().get(name)
    if not isinstance(spec, dict):
        return None
    until = spec.get("until")
    if until is not None and time.time() > float(until):
        return None
    experts = spec.get("experts")
    if experts and expert not in experts:
        return None
    return spec


def inject(name: str, error: type[Exception], expert: str | None = None) -> None:
    """The hook parts call: sleep and/or raise ``error`` when fault ``name`` is active (see the module docstring)."""
    spec = active(name, expert)
    if spec is None:
        return
    delay = float(spec.get("delay_s", 0) or 0)
    if delay > 0:
        time.sleep(min(delay, 30.0))
    if spec.get("mode", "error") in ("error", "down"):
        raise error(f"{name} fault injected (SWITCHBOARD_FAULTS_FILE)")


def write(path: str | os.PathLike[str], faults: dict[str, dict[str, Any]]) -> None:
    """Replace the faults file atomically (readers never see half a file)."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(faults))
    os.replace(tmp, target)
    # Two writes within the file system's timestamp resolution would look unchanged: bump the mtime.
    stamp = time.time_ns()
    os.utime(target, ns=(stamp, stamp))
