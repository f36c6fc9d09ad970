"""A circuit breaker per expert, shared by every process through Django's cache.

``serving.failover`` asks ``breaker_for(slug).allow()`` before each expert and reports
``record_success()`` or ``record_failure(kind)``; the rules are ``experts.circuit``'s with the
``BREAKER_*`` settings, and a probe that never reports back frees its slot after
``BREAKER_PROBE_TIMEOUT_SECONDS``. The state lives in ``caches[settings.BREAKER_CACHE]`` (Redis shares
it); the probe is claimed with the atomic ``cache.add``, while two failures at the same instant may count once.
While that cache cannot be reached, every breaker reads closed and forgets what it is told (logged at
most every ``UNREACHABLE_LOG_S``): requests are served as without breakers rather than failed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.core.cache import BaseCache, caches

from .circuit import CLOSED, HALF_OPEN, OPEN, BreakerPolicy, BreakerState, on_failure, on_success, probe_slot, start_probe

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker", "all_breakers", "breaker_for", "policy_from_settings"]

_KEY = "breaker:v1:{slug}"
_PROBE_KEY = "breaker:v1:{slug}:probe:{opened_at}:{slot}"
# State outlives any window or reset period by far; an expired key is a closed breaker.
_STATE_TTL_S = 24 * 3600
# One warning per this many seconds while the cache is unreachable, not one per request.
UNREACHABLE_LOG_S = 10.0

logger = logging.getLogger(__name__)
_last_warning = [0.0]


def _unreachable(action: str) -> None:
    """Log (at most every ``UNREACHABLE_LOG_S``) that the breakers' cache could not be reached."""
    now = time.monotonic()
    if now - _last_warning[0] >= UNREACHABLE_LOG_S:
        _last_warning[0] = now
        logger.warning("breaker.cache_unreachable", extra={"action": action}, exc_info=True)


def policy_from_settings() -> BreakerPolicy:
    """The thresholds from the ``BREAKER_*`` settings."""
    return BreakerPolicy(
        failures=settings.BREAKER_FAILURES,
        window_failures=settings.BREAKER_WINDOW_FAILURES,
        window_s=settings.BREAKER_WINDOW_SECONDS,
        reset_s=settings.BREAKER_RESET_SECONDS,
        probe_timeout_s=settings.BREAKER_PROBE_TIMEOUT_SECONDS,
    )


class CircuitBreaker:
    """One expert's breaker; cheap to create (all state is in the cache), so make one per request."""

    def __init__(self, slug: str, *, cache: BaseCache | None = None, policy: BreakerPolicy | None = None, clock: Callable[[], float] = time.time):
        self.slug = slug
        self.cache = cache if cache is not None else caches[settings.BREAKER_CACHE]
        self.policy = policy or policy_from_settings()
        self.clock = clock
        self._key = _KEY.format(slug=slug)

    def _load(self) -> BreakerState:
        try:
            return BreakerState.from_dict(self.cache.get(self._key))
        except Exception:  # the cache (Redis) is down: a closed breaker, so the expert is tried (see the module docstring)
            _unreachable("read")
            return BreakerState()

    def _save(self, state: BreakerState) -> None:
        try:
            if state.is_clean:
                self.cache.delete(self._key)
            else:
                self.cache.set(self._key, state.to_dict(), timeout=_STATE_TTL_S)
        except Exception:  # the cache is down: this failure or success is not remembered
            _unreachable("write")

    def allow(self) -> bool:
        """May a call go to this expert now? (closed: yes; open: only the one half-open probe)."""
        state = self._load()
        if state.state == CLOSED:
            return True
        now = self.clock()
        slot = probe_slot(state, self.policy, now)
        if slot is None:
            return False
        probe_key = _PROBE_KEY.format(slug=self.slug, opened_at=repr(state.opened_at), slot=slot)
        ttl = int(self.policy.reset_s + self.policy.probe_timeout_s * 2) + 60
        try:
            claimed = self.cache.add(probe_key, now, timeout=ttl)
        except Exception:  # the cache went away between the read and the claim: let this one probe
            _unreachable("probe")
            claimed = True
        if not claimed:
            return False  # another caller holds this slot's probe
        self._save(start_probe(state, now))
        return True

    def record_success(self) -> None:
        """The expert answered: close a half-open breaker, reset the consecutive-failure count."""
        state = self._load()
        if state.is_clean:
            return  # the common case costs one cache read and no write
        self._save(on_success(state, self.policy, self.clock()))

    def record_failure(self, kind: str) -> None:
        """The expert failed (``kind``: the exception's ``kind``, e.g. "generator_timeout")."""
        self._save(on_failure(self._load(), self.policy, self.clock(), kind or "error"))

    def reset(self) -> None:
        """Forget everything (an operator closing the breaker by hand)."""
        self.cache.delete(self._key)

    @property
    def state(self) -> str:
        """"closed", "open" or "half_open"."""
        return self._load().state

    def snapshot(self) -> dict[str, Any]:
        """For the console and metrics: state, consecutive failures, opened_at, last error kind."""
        return _snapshot(self._load(), self.policy, self.clock())


def _snapshot(state: BreakerState, policy: BreakerPolicy, now: float) -> dict[str, Any]:
    retry_in = None
    if state.state == OPEN and state.opened_at is not None:
        retry_in = max(0.0, round(state.opened_at + policy.reset_s - now, 3))
    return {
        "state": state.state,
        "failures": state.failures,
        "recent_failures": len([t for t in state.recent_failures if now - t < policy.window_s]),
        "opened_at": state.opened_at,
        "retry_in_s": retry_in,
        "last_error": state.last_error or None,
        "last_failure_at": state.last_failure_at,
    }


def breaker_for(slug: str) -> CircuitBreaker:
    """The breaker of expert ``slug`` (configured from settings)."""
    return CircuitBreaker(slug)


def all_breakers(slugs: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``{slug: snapshot}`` for every slug, read with one ``get_many`` (closed breakers included)."""
    slugs = list(slugs)
    cache = caches[settings.BREAKER_CACHE]
    policy = policy_from_settings()
    stored = cache.get_many([_KEY.format(slug=s) for s in slugs])
    now = time.time()
    return {s: _snapshot(BreakerState.from_dict(stored.get(_KEY.format(slug=s))), policy, now) for s in slugs}
