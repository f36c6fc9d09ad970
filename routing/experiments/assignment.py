"""The serving path's view of experiments: which arm a request falls in.

``serving.chat.answer`` calls ``assign`` once per request; it must stay cheap (no more than one
small indexed query, cached) because it runs on the hot path.

Assignment is deterministic: ``sha256(salt:subject)`` read as a number in [0, 1) is compared with
the experiment's treatment share, so a subject keeps its arm for the experiment's life (the salt is
fixed at creation, and a new experiment gets a new salt, so arms are independent across experiments).
When several experiments run at once (on different experts), each subject takes part in exactly one:
the one with the highest ``sha256(experiment salt:subject)`` (rendezvous hashing), so starting or
ending an experiment only moves the subjects that join or leave it and never reshuffles the others.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field

CACHE_SECONDS = 5.0


@dataclass(frozen=True)
class ArmAssignment:
    """The experiment arm a request is served by and what that arm changes.

    ``router_version`` (a RouterVersion.version) replaces the active router when set;
    ``expert_versions`` maps an expert slug to the ExpertVersion.version that serves it in this arm.
    """

    experiment_id: int
    arm: str
    router_version: int | None = None
    expert_versions: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Running:
    pk: int
    salt: str
    split: float
    kind: str
    slug: str
    control: int
    treatment: int


_cache: dict[str, tuple[float, list[_Running]]] = {}
_lock = threading.Lock()


def clear_cache() -> None:
    """Forget the cached running experiments (called when one starts, pauses or ends in this process)."""
    with _lock:
        _cache.clear()


def _running() -> list[_Running]:
    now = time.monotonic()
    with _lock:
        cached = _cache.get("running")
        if cached is not None and now - cached[0] < CACHE_SECONDS:
            return cached[1]
    from .models import Experiment  # the hot path imports this module before apps load in some entry points

    rows = [
        _Running(e.pk, e.salt, e.split, e.kind, e.expert.slug if e.expert_id else "", e.control_version, e.treatment_version)
        for e in Experiment.objects.filter(status="running").select_related("expert").order_by("pk")
    ]
    with _lock:
        _cache["running"] = (now, rows)
    return rows


def unit_hash(salt: str, subject: str) -> float:
    """A uniform number in [0, 1) from the salt and the subject (the first 60 bits of sha256)."""
    digest = hashlib.sha256(f"{salt}:{subject}".encode()).digest()
    return (int.from_bytes(digest[:8], "big") >> 4) / float(1 << 60)


def arm_for(salt: str, split: float, subject: str) -> str:
    """'treatment' for the share ``split`` of subjects, 'control' for the others; the same subject always gets the same arm."""
    # A second, independent hash (the "arm" suffix) so the arm does not correlate with the rendezvous choice.
    return "treatment" if unit_hash(salt + ":arm", subject) < split else "control"


def assign(subject: str) -> ArmAssignment | None:
    """The arm of the running experiment that ``subject`` (a conversation or user hash) falls in, or None."""
    if not subject:
        return None
    running = _running()
    if not running:
        return None
    chosen = max(running, key=lambda e: unit_hash(e.salt, subject))
    arm = arm_for(chosen.salt, chosen.split, subject)
    version = chosen.treatment if arm == "treatment" else chosen.control
    if chosen.kind == "router":
        return ArmAssignment(chosen.pk, arm, router_version=version)
    return ArmAssignment(chosen.pk, arm, expert_versions={chosen.slug: version})
