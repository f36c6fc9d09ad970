"""Routing events: buffered, written in batches off the request thread, never lost on a transient DB error."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.db import OperationalError
from django.utils import timezone

from routing.models import RoutingEvent
from serving import events, metrics
from serving.events import EventWriter, purge_old_events


def fields(i: int) -> dict:
    return {"request_id": f"chatcmpl-{i}", "mode": "auto", "expert": "ssa", "total_ms": 12.5, "embed_ms": 3.0}


class FlakyWrite:
    """Stores batches in memory; raises for the first ``failures`` calls, like a database restarting."""

    def __init__(self, failures: int = 0):
        self.failures = failures
        self.batches: list[list[str]] = []

    def __call__(self, batch):
        if self.failures:
            self.failures -= 1
            raise OperationalError("database is locked")
        self.batches.append([e.request_id for e in batch])


def test_flush_writes_everything_in_batches_of_the_configured_size():
    write = FlakyWrite()
    writer = EventWriter(write, flush_ms=60_000, batch_size=4, background=False)
    for i in range(10):
        writer.add(RoutingEvent(**fields(i)))
    assert writer.flush() == 10
    assert [len(b) for b in write.batches] == [4, 4, 2]
    assert [r for b in write.batches for r in b] == [f"chatcmpl-{i}" for i in range(10)]
    writer.close()


def test_a_transient_database_error_loses_nothing_and_keeps_the_order():
    write = FlakyWrite(failures=2)
    writer = EventWriter(write, flush_ms=60_000, batch_size=3, background=False)
    for i in range(5):
        writer.add(RoutingEvent(**fields(i)))
    for _ in range(2):
        with pytest.raises(OperationalError):
            writer.flush()
    assert len(writer) == 5
    assert writer.failures == 2
    assert writer.flush() == 5
    assert [r for b in write.batches for r in b] == [f"chatcmpl-{i}" for i in range(5)]
    writer.close()


def test_the_background_thread_retries_until_the_database_is_back():
    write = FlakyWrite(failures=2)
    writer = EventWriter(write, flush_ms=10, batch_size=100)
    for i in range(3):
        writer.add(RoutingEvent(**fields(i)))
    deadline = time.monotonic() + 10
    while not write.batches and time.monotonic() < deadline:
        time.sleep(0.02)
    writer.close()
    assert [r for b in write.batches for r in b] == ["chatcmpl-0", "chatcmpl-1", "chatcmpl-2"]
    assert writer.failures == 2


def test_a_full_buffer_drops_new_events_and_counts_them(caplog):
    writer = EventWriter(FlakyWrite(failures=10**6), flush_ms=60_000, batch_size=100, buffer_max=3, background=False)
    before = metrics.EVENTS_DROPPED._value.get()
    accepted = [writer.add(RoutingEvent(**fields(i))) for i in range(5)]
    assert accepted == [True, True, True, False, False]
    assert writer.dropped == 2
    assert metrics.EVENTS_DROPPED._value.get() - before == 2
    assert "routing event buffer full" in caplog.text


@pytest.mark.django_db(transaction=True)
def test_record_returns_before_the_write_and_the_thread_bulk_writes(settings, monkeypatch):
    settings.EVENTS_SYNC = False
    calls: list[int] = []

    def counting_write(batch):
        calls.append(len(batch))
        RoutingEvent.objects.bulk_create(batch)

    writer = EventWriter(counting_write, flush_ms=50, batch_size=100)
    monkeypatch.setattr(events._writer, "value", writer)
    for i in range(20):
        events.record(**fields(i))
    deadline = time.monotonic() + 10
    while RoutingEvent.objects.count() < 20 and time.monotonic() < deadline:
        time.sleep(0.02)
    writer.close()
    assert RoutingEvent.objects.count() == 20
    assert len(calls) < 20


@pytest.mark.django_db
def test_with_events_sync_the_row_is_written_in_the_request(settings):
    settings.EVENTS_SYNC = True
    events.record(**fields(1))
    assert RoutingEvent.objects.filter(request_id="chatcmpl-1").exists()


@pytest.mark.django_db
def test_a_misspelt_field_fails_in_the_caller():
    with pytest.raises(TypeError):
        events.record(request_id="x", no_such_field=1)


@pytest.mark.django_db
def test_retention_deletes_only_events_older_than_the_window(settings):
    settings.EVENTS_SYNC = True
    for i in range(7):
        events.record(**fields(i))
    old = list(RoutingEvent.objects.order_by("pk").values_list("pk", flat=True)[:5])
    RoutingEvent.objects.filter(pk__in=old).update(created_at=timezone.now() - timedelta(days=31))
    RoutingEvent.objects.exclude(pk__in=old).update(created_at=timezone.now() - timedelta(days=29))
    assert purge_old_events(days=30, batch_size=2) == 5
    assert set(RoutingEvent.objects.values_list("pk", flat=True)).isdisjoint(old)
    assert RoutingEvent.objects.count() == 2


@pytest.mark.django_db
def test_the_retention_uses_the_setting(settings):
    settings.ROUTING_EVENT_RETENTION_DAYS = 10
    settings.EVENTS_SYNC = True
    events.record(**fields(1))
    events.record(**fields(2))
    RoutingEvent.objects.filter(request_id="chatcmpl-1").update(created_at=timezone.now() - timedelta(days=11))
    assert purge_old_events() == 1
    assert list(RoutingEvent.objects.values_list("request_id", flat=True)) == ["chatcmpl-2"]


def test_a_retention_below_one_day_is_refused():
    with pytest.raises(ValueError, match="at least one day"):
        purge_old_events(days=0)


def test_an_event_added_after_close_is_written_by_the_caller():
    """A request that finishes after the shutdown hook closed the writer still gets its row (no thread is left to write it)."""
    write = FlakyWrite()
    writer = EventWriter(write, flush_ms=60_000, batch_size=100)
    writer.close()
    assert writer.add(RoutingEvent(**fields(1)))
    assert write.batches == [["chatcmpl-1"]]
    assert len(writer) == 0


def test_the_asgi_lifespan_shutdown_writes_the_buffered_events(settings, monkeypatch):
    """uvicorn re-raises SIGTERM after a graceful stop, so at-exit hooks never run: the lifespan shutdown must flush.

    The soak (``bench soak``) found the last answered request of every run without its event: it was
    still in the buffer (flushed every EVENTS_FLUSH_MS) when the server was stopped.
    """
    import asyncio
    import os

    monkeypatch.setitem(os.environ, "SWITCHBOARD_WARMUP", "0")
    from switchboard.asgi import application

    settings.EVENTS_SYNC = False
    write = FlakyWrite()
    writer = EventWriter(write, flush_ms=60_000, batch_size=100)  # nothing written before shutdown but for it
    monkeypatch.setattr(events._writer, "value", writer)
    events.record(**fields(7))
    assert write.batches == []

    async def serve() -> list[str]:
        inbox = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
        sent: list[str] = []

        async def receive():
            return inbox.pop(0)

        async def send(message):
            sent.append(message["type"])

        await application({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
        return sent

    assert asyncio.run(serve()) == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    assert write.batches == [["chatcmpl-7"]]


class CommitThenLoseConnection(FlakyWrite):
    """The first ``failures`` batches reach the database and commit, then the connection dies before the answer."""

    def __call__(self, batch):
        self.batches.append([e.request_id for e in batch])
        if self.failures:
            self.failures -= 1
            raise OperationalError("server closed the connection unexpectedly")

    def committed(self, batch) -> bool:
        stored = {r for b in self.batches for r in b}
        return any(e.request_id in stored for e in batch)


def test_a_batch_committed_before_its_connection_died_is_not_written_again():
    write = CommitThenLoseConnection(failures=1)
    writer = EventWriter(write, flush_ms=60_000, batch_size=3, background=False, committed=write.committed)
    for i in range(2):
        writer.add(RoutingEvent(**fields(i)))
    with pytest.raises(OperationalError):
        writer.flush()
    for i in range(2, 5):  # recorded while the database was away: written after the failed batch, once
        writer.add(RoutingEvent(**fields(i)))
    assert writer.flush() == 5
    assert [r for b in write.batches for r in b] == [f"chatcmpl-{i}" for i in range(5)]
    assert writer.written == 5
    assert len(writer) == 0


def test_a_batch_that_never_reached_the_database_is_written_on_the_retry():
    write = FlakyWrite(failures=1)
    writer = EventWriter(write, flush_ms=60_000, batch_size=3, background=False, committed=lambda batch: False)
    writer.add(RoutingEvent(**fields(1)))
    with pytest.raises(OperationalError):
        writer.flush()
    assert writer.flush() == 1
    assert write.batches == [["chatcmpl-1"]]


@pytest.mark.django_db
def test_the_database_tells_whether_a_failed_batch_was_committed(monkeypatch):
    """The real writer against the database: the first bulk insert commits and then raises, as a restart can make it."""
    manager = type(RoutingEvent.objects)
    real_bulk_create = manager.bulk_create
    failures = [OperationalError("server closed the connection unexpectedly")]

    def bulk_create(self, rows, *args, **kwargs):
        created = real_bulk_create(self, rows, *args, **kwargs)
        if failures:
            raise failures.pop()
        return created

    monkeypatch.setattr(manager, "bulk_create", bulk_create)
    writer = EventWriter(flush_ms=60_000, batch_size=10, background=False)
    for i in range(3):
        writer.add(RoutingEvent(**fields(i)))
    with pytest.raises(OperationalError):
        writer.flush()
    writer.add(RoutingEvent(**fields(3)))
    assert writer.flush() == 4
    assert sorted(RoutingEvent.objects.values_list("request_id", flat=True)) == [f"chatcmpl-{i}" for i in range(4)]
