"""Recording routing events off the hot path: one row per routed request, written in batches.

``record(**fields)`` updates the metrics and buffers the event; a background thread writes the buffer
with one ``bulk_create`` every ``EVENTS_FLUSH_MS`` or at ``EVENTS_BATCH_SIZE`` (with ``EVENTS_SYNC``, in
the calling thread). A failed batch is retried with backoff up to ``MAX_BACKOFF_S``; events are dropped,
counted and logged only past ``EVENTS_BUFFER_MAX``. A failed batch whose COMMIT may have gone through
before its connection died (a database restart) is looked up before it is written again, so no event is
written twice. ``flush()`` runs at shutdown and at exit.
``purge_old_events`` deletes rows older than ``ROUTING_EVENT_RETENTION_DAYS``.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connections, transaction

from routing.models import RoutingEvent
from routing.retention import purge_old_events as purge_old_events  # its public name here too (tests, scripts)
from sbcommon.lazy import ProcessSingleton

from . import metrics

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 5.0


@dataclass(frozen=True)
class Deferred:
    """A row of another table written with the next batch of events.

    ``write(rows)`` runs inside the batch's transaction (rows deferred with the same functions are
    written together), ``written(rows)`` after it commits. The conversation store defers its rows
    this way, so the writer needs to know nothing about conversations.
    """

    row: Any
    write: Callable[[list[Any]], None]
    written: Callable[[list[Any]], None]


def _bulk_write(items: list[Any]) -> None:
    """Write a batch: routing events, and the rows deferred with them, in one transaction."""
    deferred = [item for item in items if isinstance(item, Deferred)]
    rows = [item for item in items if not isinstance(item, Deferred)]
    if not deferred:
        RoutingEvent.objects.bulk_create(rows)
        return
    groups: dict[tuple[Callable[[list[Any]], None], Callable[[list[Any]], None]], list[Any]] = {}
    for item in deferred:
        groups.setdefault((item.write, item.written), []).append(item.row)
    with transaction.atomic():  # all or nothing: a retried batch writes no event twice
        RoutingEvent.objects.bulk_create(rows)
        for (write, _), group in groups.items():
            write(group)
    _written(items)


def _written(items: list[Any]) -> None:
    """Tell the deferred rows' owners that their rows are in the database."""
    groups: dict[Callable[[list[Any]], None], list[Any]] = {}
    for item in items:
        if isinstance(item, Deferred):
            groups.setdefault(item.written, []).append(item.row)
    for written, group in groups.items():
        written(group)


def _committed(items: list[Any]) -> bool:
    """Was this batch, whose write raised, committed after all? (COMMIT reached the database, its answer did not.)

    A batch is one transaction (``bulk_create`` of its events, with its deferred rows in ``atomic``), so
    one of its events found by ``request_id`` (one per chat request) means all of it was. A batch of
    deferred rows alone cannot be told; it is written again (the conversation store's rows are upserts).
    """
    ids = [item.request_id for item in items if isinstance(item, RoutingEvent) and item.request_id]
    if not ids:
        return False
    return RoutingEvent.objects.filter(request_id__in=ids).exists()


class EventWriter:
    """A bounded buffer of events and the thread that writes it in batches (see the module docstring)."""

    def __init__(self, write: Callable[[list[RoutingEvent]], None] = _bulk_write, *, flush_ms: int = 500, batch_size: int = 200,
                 buffer_max: int = 20000, background: bool = True, committed: Callable[[list[Any]], bool] | None = None):
        self._write = write
        # After a failed write: was that batch committed after all? (``_committed`` with the real write; a write
        # passed in is taken at its word unless it comes with its own check.)
        self._committed = committed or (_committed if write is _bulk_write else lambda items: False)
        self._unconfirmed: list[Any] = []  # the batch whose write failed, until it is known whether it committed
        self.background = background  # False: nothing is written until flush() (tests, one-shot scripts)
        self.flush_interval = max(1, flush_ms) / 1000.0
        self.batch_size = max(1, batch_size)
        self.buffer_max = max(1, buffer_max)
        self._buffer: deque[RoutingEvent] = deque()
        self._cond = threading.Condition()
        self._write_lock = threading.Lock()  # one writer at a time: the thread or a flush()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.written = 0
        self.dropped = 0
        self.failures = 0

    def __len__(self) -> int:
        return len(self._buffer)

    def add(self, event: RoutingEvent) -> bool:
        """Buffer ``event``; False (and counted) when the buffer is full."""
        with self._cond:
            if len(self._buffer) >= self.buffer_max:
                self.dropped += 1
                dropped = self.dropped
                accepted = False
            else:
                self._buffer.append(event)
                accepted = True
                if len(self._buffer) >= self.batch_size:
                    self._cond.notify()
        if not accepted:
            metrics.EVENTS_DROPPED.inc()
            if dropped == 1 or dropped % 1000 == 0:
                logger.error("routing event buffer full (%d waiting): dropped %d events so far; is the database reachable?",
                             self.buffer_max, dropped)
            return False
        if self._stopping:  # closed (shutdown): no thread will write it, so write it now, in the caller
            try:
                self.flush()
            except Exception:
                logger.exception("routing events: %d events could not be written after shutdown", len(self._buffer))
            return True
        self._ensure_thread()
        return True

    def flush(self) -> int:
        """Write every buffered event now, in the caller's thread; returns how many were written.

        Raises the database error if a batch cannot be written (its events stay buffered).
        """
        total = 0
        while True:
            written = self._write_batch(raise_errors=True)
            if not written:
                return total
            total += written

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread and write what is left (at-exit hook)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        try:
            self.flush()
        except Exception:
            logger.exception("routing events: %d events could not be written at shutdown", len(self._buffer))

    # -- the writer thread ------------------------------------------------------------------------
    def _ensure_thread(self) -> None:
        if not self.background or (self._thread is not None and self._thread.is_alive()):
            return
        with self._cond:
            if self._stopping or (self._thread is not None and self._thread.is_alive()):
                return
            self._thread = threading.Thread(target=self._run, name="routing-events-writer", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        backoff = 0.0
        try:
            while True:
                with self._cond:
                    if not self._stopping and len(self._buffer) < self.batch_size:
                        self._cond.wait(self.flush_interval + backoff)
                    if self._stopping:
                        return
                try:
                    while self._write_batch(raise_errors=True) == self.batch_size:
                        pass  # a full batch: more may be waiting
                    backoff = 0.0
                except Exception:
                    backoff = min(MAX_BACKOFF_S, max(self.flush_interval, backoff * 2))
                    try:
                        connections["default"].close()  # the retry reconnects instead of reusing a broken connection
                    except Exception:  # closing a connection to a database that is gone may fail too; it is dropped either way
                        logger.debug("routing events: closing the broken connection failed", exc_info=True)
        finally:
            connections.close_all()  # this thread's connections only (they are thread-local)

    def _write_batch(self, *, raise_errors: bool) -> int:
        with self._write_lock:
            with self._cond:
                batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
            if not batch:
                return 0
            try:
                confirmed = self._confirm(batch) if self._unconfirmed else 0
                if confirmed:
                    self.written += confirmed
                    return confirmed
                self._write(batch)
            except Exception as exc:
                with self._cond:
                    self._buffer.extendleft(reversed(batch))  # back to the front, in order: retried next
                self._unconfirmed = self._unconfirmed or batch
                self.failures += 1
                metrics.EVENTS_WRITE_FAILURES.inc()
                logger.warning("routing events: writing %d events failed (%s); %d buffered, will retry", len(batch), exc, len(self._buffer))
                if raise_errors:
                    raise
                return 0
            self.written += len(batch)
            return len(batch)

    def _confirm(self, batch: list[Any]) -> int:
        """Called with the next batch after a failed write: how many items the failed one had committed after all.

        Those (at the front of ``batch``: failed batches go back to the front) are then dropped and the
        rest of ``batch`` goes back to the buffer; 0: nothing of it is in the database, write ``batch``.
        Raises what the look-up raises (the database is still down): the failed batch stays unconfirmed.
        """
        failed = self._unconfirmed
        if len(batch) < len(failed) or any(a is not b for a, b in zip(batch, failed, strict=False)):
            self._unconfirmed = []  # not the failed batch after all (cannot happen while one thread writes at a time)
            return 0
        committed = self._committed(failed)
        self._unconfirmed = []
        if not committed:
            return 0
        _written(failed)
        logger.warning("routing events: a batch of %d whose write failed had been committed; not written again", len(failed))
        with self._cond:
            self._buffer.extendleft(reversed(batch[len(failed):]))
        return len(failed)


def _make_writer() -> EventWriter:
    writer = EventWriter(flush_ms=settings.EVENTS_FLUSH_MS, batch_size=settings.EVENTS_BATCH_SIZE,
                         buffer_max=settings.EVENTS_BUFFER_MAX)
    atexit.register(writer.close)
    return writer


_writer = ProcessSingleton(_make_writer)


def get_writer() -> EventWriter:
    """The process's event writer, made on first use from the EVENTS_* settings."""
    return _writer.get()


def record(**fields: Any) -> None:
    """Record one routing event (field names as on ``RoutingEvent``): metrics now, the row soon.

    A misspelt field fails here, in the caller, not later in the writer thread.
    """
    event = RoutingEvent(**fields)
    metrics.observe_event(fields)
    if settings.EVENTS_SYNC:
        event.save()
        return
    get_writer().add(event)


def defer(row: Any, write: Callable[[list[Any]], None], written: Callable[[list[Any]], None]) -> bool:
    """Have the writer save ``row`` with the next batch (see ``Deferred``); False when its buffer is full."""
    return get_writer().add(Deferred(row, write, written))


def buffered() -> int:
    """Events (and deferred rows) waiting to be written in this process."""
    writer = _writer.value
    return len(writer) if writer is not None else 0


def flush() -> None:
    """Write any buffered events now (tests, bench and shutdown call this)."""
    if (writer := _writer.value) is not None:
        writer.flush()


def shutdown() -> None:
    """Stop the writer thread and write what is buffered: the server's shutdown hook (the ASGI lifespan).

    At-exit hooks are not enough: uvicorn re-raises the SIGTERM it handled once it has stopped,
    which kills the process without running them. Events recorded later are written in the caller.
    """
    if (writer := _writer.value) is not None:
        writer.close()


metrics.EVENTS_BUFFERED.set_function(buffered)
