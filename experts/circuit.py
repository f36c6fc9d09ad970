"""The circuit-breaker state machine, as pure functions of (state, policy, now).

``closed`` (calls go through), ``open`` (refused until ``reset_s`` has passed) or ``half_open`` (one
probe in flight decides). It opens after ``failures`` consecutive failures, or ``window_failures``
within ``window_s`` even with successes between. ``experts.breaker`` stores the state and passes the
clock in, so tests drive it with a fake clock.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


@dataclass(frozen=True)
class BreakerPolicy:
    """When a breaker opens and how long it stays open.

    Attributes:
        failures: consecutive failures that open the breaker.
        window_failures: failures within ``window_s`` that open it, successes in between or not.
        window_s: the length of that window, in seconds.
        reset_s: how long an open breaker refuses calls before it lets one probe through.
        probe_timeout_s: a probe that never reports back (its process died) frees the slot after this.
    """

    failures: int = 5
    window_failures: int = 10
    window_s: float = 60.0
    reset_s: float = 30.0
    probe_timeout_s: float = 60.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window_failures < 1:
            raise ValueError("a breaker needs at least one failure to open")
        if self.window_s <= 0 or self.reset_s < 0 or self.probe_timeout_s <= 0:
            raise ValueError("breaker durations must be positive")


@dataclass
class BreakerState:
    """What one breaker remembers (JSON-serialisable through ``to_dict``/``from_dict``)."""

    state: str = CLOSED
    failures: int = 0
    recent_failures: list[float] = field(default_factory=list)
    opened_at: float | None = None
    probe_started_at: float | None = None
    last_error: str = ""
    last_failure_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> BreakerState:
        if not data:
            return cls()
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    @property
    def is_clean(self) -> bool:
        """True when the state holds nothing worth storing (closed, no failures remembered)."""
        return self.state == CLOSED and self.failures == 0 and not self.recent_failures


def probe_slot(state: BreakerState, policy: BreakerPolicy, now: float) -> int | None:
    """Which probe slot is open now, or None when no call may go through as a probe.

    Slot 0 opens ``reset_s`` after the breaker opened; every ``probe_timeout_s`` after that a new
    slot opens, so a probe whose process died without reporting does not keep the breaker shut. The
    caller lets exactly one call through per slot (``experts.breaker`` claims it with ``cache.add``).
    """
    if state.state not in (OPEN, HALF_OPEN) or state.opened_at is None:
        return None
    elapsed = now - state.opened_at - policy.reset_s
    if elapsed < 0:
        return None
    return int(elapsed // policy.probe_timeout_s)


def start_probe(state: BreakerState, now: float) -> BreakerState:
    """The state once a probe call has been let through (``opened_at`` stays: it numbers the slots)."""
    return replace(state, state=HALF_OPEN, probe_started_at=now)


def on_success(state: BreakerState, policy: BreakerPolicy, now: float) -> BreakerState:
    """A call succeeded: a probe closes the breaker; a closed breaker forgets its consecutive count."""
    if state.state == HALF_OPEN:
        return BreakerState(last_error=state.last_error, last_failure_at=state.last_failure_at)
    if state.state == OPEN:
        return state  # a call that started before the breaker opened; only a probe may close it
    recent = _prune(state.recent_failures, policy, now)
    return replace(state, failures=0, recent_failures=recent)


def on_failure(state: BreakerState, policy: BreakerPolicy, now: float, kind: str) -> BreakerState:
    """A call failed with ``kind``: count it, and open the breaker when a threshold is reached."""
    recent = [*_prune(state.recent_failures, policy, now), now]
    failed = replace(state, failures=state.failures + 1, recent_failures=recent, last_error=kind, last_failure_at=now)
    if state.state == HALF_OPEN:
        return replace(failed, state=OPEN, opened_at=now, probe_started_at=None)  # the probe failed
    if state.state == OPEN:
        return failed  # a call that started before the breaker opened: nothing more to decide
    if failed.failures >= policy.failures or len(recent) >= policy.window_failures:
        return replace(failed, state=OPEN, opened_at=now, probe_started_at=None)
    return failed


def _prune(times: list[float], policy: BreakerPolicy, now: float) -> list[float]:
    """Failure times still inside the window (keeping at most ``window_failures`` of them)."""
    kept = [t for t in times if now - t < policy.window_s]
    return kept[-policy.window_failures :]
