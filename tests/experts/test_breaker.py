"""The circuit breaker per expert, driven by a fake clock over a real Django cache backend."""

from __future__ import annotations

import uuid

import pytest
from django.core.cache.backends.locmem import LocMemCache

from experts import breaker as breaker_module
from experts.breaker import CircuitBreaker, all_breakers, breaker_for
from experts.circuit import BreakerPolicy

POLICY = BreakerPolicy(failures=3, window_failures=4, window_s=60, reset_s=30, probe_timeout_s=10)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache():
    # LocMemCache instances with one name share their storage: a fresh name per test.
    return LocMemCache(f"breaker-tests-{uuid.uuid4()}", {})


def make(slug: str, cache, clock: Clock) -> CircuitBreaker:
    # Two instances over one cache stand for two processes sharing Redis.
    return CircuitBreaker(slug, cache=cache, policy=POLICY, clock=clock)


@pytest.fixture
def tripped(cache, clock) -> CircuitBreaker:
    """dmv's breaker, opened by three timeouts at the clock's start."""
    breaker = make("dmv", cache, clock)
    trip(breaker, "generator_timeout")
    return breaker


def trip(breaker: CircuitBreaker, kind: str) -> None:
    """Three failures in a row: POLICY opens the breaker."""
    for _ in range(POLICY.failures):
        breaker.record_failure(kind)


def test_it_stays_closed_below_the_consecutive_threshold(cache, clock):
    breaker = make("dmv", cache, clock)
    breaker.record_failure("generator_timeout")
    breaker.record_failure("generator_timeout")
    assert breaker.state == "closed"
    assert breaker.allow() is True


def test_it_opens_after_consecutive_failures_and_refuses_calls(cache, clock):
    breaker = make("dmv", cache, clock)
    trip(breaker, "generator_unavailable")
    assert breaker.state == "open"
    assert breaker.allow() is False
    snap = breaker.snapshot()
    assert snap["state"] == "open"
    assert snap["failures"] == 3
    assert snap["opened_at"] == 1_000.0
    assert snap["last_error"] == "generator_unavailable"
    assert snap["retry_in_s"] == 30.0


def test_a_success_resets_the_consecutive_count(cache, clock):
    breaker = make("dmv", cache, clock)
    breaker.record_failure("generator_error")
    breaker.record_failure("generator_error")
    breaker.record_success()
    breaker.record_failure("generator_error")  # 3 failures in all, but only 1 consecutive
    assert breaker.state == "closed"
    assert breaker.snapshot()["failures"] == 1
    assert breaker.snapshot()["recent_failures"] == 3


def test_it_opens_on_failures_within_the_window_even_with_successes_between(cache, clock):
    breaker = make("dmv", cache, clock)
    for _ in range(3):
        breaker.record_failure("generator_error")
        breaker.record_success()
        clock.now += 5
    assert breaker.state == "closed"
    breaker.record_failure("generator_error")  # the 4th failure within 60 s
    assert breaker.state == "open"


def test_failures_older_than_the_window_are_forgotten(cache, clock):
    breaker = make("dmv", cache, clock)
    for _ in range(3):
        breaker.record_failure("generator_error")
        breaker.record_success()
        clock.now += 30  # spread over 90 s: never 4 within 60 s
    breaker.record_failure("generator_error")
    assert breaker.state == "closed"


def test_after_the_reset_period_exactly_one_probe_is_allowed_across_processes(cache, clock):
    first, second = make("dmv", cache, clock), make("dmv", cache, clock)
    trip(first, "generator_timeout")
    clock.now += 29.9
    assert first.allow() is False
    clock.now += 0.1
    assert first.allow() is True  # the probe
    assert second.allow() is False
    assert first.allow() is False
    assert second.state == "half_open"


def test_a_successful_probe_closes_the_breaker(tripped, clock):
    clock.now += 30
    assert tripped.allow() is True
    tripped.record_success()
    assert tripped.state == "closed"
    assert tripped.allow() is True
    assert tripped.snapshot()["failures"] == 0
    # It takes the full threshold again to re-open.
    tripped.record_failure("generator_timeout")
    assert tripped.state == "closed"


def test_a_failed_probe_reopens_for_another_reset_period(tripped, clock):
    clock.now += 30
    assert tripped.allow() is True
    tripped.record_failure("generator_unavailable")
    assert tripped.state == "open"
    assert tripped.snapshot()["opened_at"] == clock.now
    clock.now += 29
    assert tripped.allow() is False
    clock.now += 1
    assert tripped.allow() is True


def test_a_probe_that_never_reports_back_is_replaced_after_the_probe_timeout(tripped, clock):
    clock.now += 30
    assert tripped.allow() is True  # this probe's process dies
    clock.now += 9
    assert tripped.allow() is False
    clock.now += 1
    assert tripped.allow() is True
    assert tripped.allow() is False


def test_a_late_success_from_before_the_opening_does_not_close_it(tripped, clock):
    tripped.record_success()
    assert tripped.state == "open"


def test_breakers_are_per_expert(cache, clock):
    dmv, ssa = make("dmv", cache, clock), make("ssa", cache, clock)
    trip(dmv, "store_unavailable")
    assert dmv.allow() is False
    assert ssa.allow() is True


def test_reset_closes_it_by_hand(tripped, clock):
    tripped.reset()
    assert tripped.state == "closed"


def test_a_bad_policy_is_refused():
    with pytest.raises(ValueError, match="at least one failure"):
        BreakerPolicy(failures=0)


def test_breaker_for_uses_the_configured_cache_and_thresholds(settings):
    settings.BREAKER_FAILURES = 2
    breaker_for("va").reset()
    breaker_for("va").record_failure("generator_timeout")
    assert breaker_for("va").state == "closed"
    breaker_for("va").record_failure("generator_timeout")
    assert breaker_for("va").state == "open"
    snapshots = all_breakers(["va", "irs"])
    assert snapshots["va"]["state"] == "open"
    assert snapshots["va"]["last_error"] == "generator_timeout"
    assert snapshots["irs"] == {
        "state": "closed", "failures": 0, "recent_failures": 0, "opened_at": None,
        "retry_in_s": None, "last_error": None, "last_failure_at": None,
    }
    breaker_for("va").reset()


class UnreachableCache(LocMemCache):
    """A cache whose server is down: every call raises, as django's RedisCache does with Redis stopped."""

    def __init__(self) -> None:
        super().__init__(f"breaker-down-{uuid.uuid4()}", {})

    def get(self, *args, **kwargs):
        raise ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    set = add = delete = get


def test_with_the_cache_down_every_breaker_reads_closed_and_requests_are_served(clock, caplog, monkeypatch):
    monkeypatch.setattr(breaker_module, "_last_warning", [0.0])  # no warning logged just before by another test
    breaker = make("ssa", UnreachableCache(), clock)
    assert breaker.allow()
    trip(breaker, "generator_timeout")  # nothing to remember it in: no error either
    breaker.record_success()
    assert breaker.allow()
    assert breaker.state == "closed"
    assert "breaker.cache_unreachable" in caplog.text


def test_a_cache_that_fails_between_the_read_and_the_probe_claim_lets_the_probe_through(cache, clock, monkeypatch):
    breaker = make("ssa", cache, clock)
    trip(breaker, "generator_timeout")
    clock.now += POLICY.reset_s + 1
    monkeypatch.setattr(cache, "add", UnreachableCache().add)
    assert breaker.allow()
