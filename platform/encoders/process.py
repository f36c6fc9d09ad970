"""The sentence encoder in a child process of its own, which also micro-batches what the request threads send it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
from django.conf import settings

from .backends import make_encoder
from .base import SUB_BATCH, EncoderUnavailable, notify_batch_listeners
from .passes import measure_pass_cost, next_pass
from .space import resolve_backend

logger = logging.getLogger(__name__)


def _serve_encoder(conn, name: str, threads: int, max_batch: int, max_wait_ms: float, sub_batch: int,  # pragma: no cover - child
                   backend: str = "torch", cache_dir: str | None = None) -> None:
    """The child side of ``ProcessEncoder``: load the model, then encode what arrives, batched, until the pipe closes.

    Requests are ``(id, texts, batch_size)``; their texts join one waiting list. Before every forward
    pass the child takes in whatever the pipe holds, and when that is less than a full pass
    (``min(sub_batch, max_batch)`` texts) it waits up to ``max_wait_ms`` for more. A pass is the
    oldest waiting text and others of similar length (``next_pass``, with the pass cost measured at
    start by ``measure_pass_cost``). After each pass the requests whose texts are all done are answered at
    once, ``("ok", [(id, vectors), ...], texts in the pass)``.

    So passes stay full under load, and a long text does not pad a pass of short ones. A failed pass
    answers its requests ``("error", [ids], message)`` and drops their other texts; the rest go on.
    """
    try:
        encoder = make_encoder(name, threads=threads, sub_batch=sub_batch, backend=backend, cache_dir=cache_dir)
    except BaseException as exc:  # the parent raises it with the child's message
        conn.send(("error", [], f"{type(exc).__name__}: {exc}"))
        return
    pass_cost = measure_pass_cost(encoder)
    from sbcommon.gcfreeze import freeze_startup_objects

    freeze_startup_objects()  # the model's objects stay out of the collector's walks
    conn.send(("ready", [], encoder.dimension))
    wait = max(0.0, max_wait_ms) / 1000.0
    size = max(1, min(int(sub_batch), int(max_batch)))
    waiting: list[tuple[int, int, int, str]] = []  # (arrival order, request id, position, text)
    rows: dict[int, list[np.ndarray | None]] = {}
    left: dict[int, int] = {}
    order = 0

    def take(request) -> None:
        nonlocal order
        rid, texts, _ = request
        rows[rid], left[rid] = [None] * len(texts), len(texts)
        for pos, text in enumerate(texts):
            waiting.append((order, rid, pos, text))
            order += 1

    try:
        while True:
            if not waiting:
                take(conn.recv())
            while conn.poll(0):
                take(conn.recv())
            if len(waiting) < size and wait > 0:
                deadline = time.monotonic() + wait
                while len(waiting) < size and conn.poll(max(0.0, deadline - time.monotonic())):
                    take(conn.recv())
            chunk = next_pass(waiting, size, pass_cost)
            try:
                vectors = encoder.encode([text for _, _, _, text in chunk], batch_size=len(chunk))
            except Exception as exc:  # one bad pass must not end the process
                failed = {rid for _, rid, _, _ in chunk}
                waiting[:] = [item for item in waiting if item[1] not in failed]
                for rid in failed:
                    rows.pop(rid, None)
                    left.pop(rid, None)
                conn.send(("error", sorted(failed), f"{type(exc).__name__}: {exc}"))
                continue
            replies = []
            for (_, rid, pos, _), vector in zip(chunk, vectors, strict=True):
                rows[rid][pos] = vector
                left[rid] -= 1
                if not left[rid]:
                    del left[rid]
                    replies.append((rid, np.stack(rows.pop(rid))))
            conn.send(("ok", replies, len(chunk)))
    except (EOFError, OSError):  # the parent went away (or closed the pipe): so do we
        return


class ProcessEncoder:
    """The sentence encoder (``make_encoder``) in a child process of its own, which also does the micro-batching.

    An in-process forward pass needs the GIL after every torch op and waits behind the request
    threads (docs/ARCHITECTURE.md, "The serving process"). Every ``encode`` call sends ``(id, texts)``
    down one pipe and waits for its own rows; a reader thread hands the replies out; the child batches
    whatever is waiting (``_serve_encoder``).

    The child is started with ``spawn`` (never ``fork``: this process has threads and may have
    torch loaded) and ends when the pipe closes. If it dies, the calls waiting on it fail over to
    a fresh one once (encoding is idempotent), then raise ``EncoderUnavailable``.
    """

    def __init__(self, name: str, threads: int = 1, max_batch: int = 32, max_wait_ms: float = 2.0, start_timeout: float = 300.0,
                 backend: str | None = None):
        self.name = name
        self.backend = resolve_backend(backend)
        self.threads = int(threads)
        self.max_batch = max(1, int(max_batch))
        self.max_wait_ms = float(max_wait_ms)
        self.start_timeout = start_timeout
        self.dimension = 0
        self.starts = 0
        self.forward_passes = 0
        self._lock = threading.Lock()  # guards the pipe's write end and the state below
        self._process = None
        self._conn = None
        self._pending: dict[int, tuple[Any, Future]] = {}  # id -> (the pipe it was sent on, its future)
        self._ids = iter(range(1, 1 << 62))
        self._closed = False
        with self._lock:
            self._start()

    # -- the child ------------------------------------------------------------------------------
    def _start(self) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe(duplex=True)
        # The backend and the export folder are resolved here: a spawned child has no Django settings.
        process = ctx.Process(target=_serve_encoder, args=(child, self.name, self.threads, self.max_batch, self.max_wait_ms, SUB_BATCH,
                                                          self.backend, settings.ENCODER_EXPORT_DIR),
                              name="switchboard-encoder", daemon=True)
        process.start()
        child.close()
        if not parent.poll(self.start_timeout):
            process.kill()
            raise EncoderUnavailable(f"the encoder process did not start within {self.start_timeout:.0f} s")
        try:
            kind, _, payload = parent.recv()
        except (EOFError, OSError) as exc:
            raise EncoderUnavailable(f"the encoder process exited while starting (exit code {process.exitcode})") from exc
        if kind != "ready":
            process.join(5)
            raise EncoderUnavailable(f"the encoder process could not load {self.name!r}: {payload}")
        self._process, self._conn, self.dimension = process, parent, int(payload)
        self.starts += 1
        threading.Thread(target=self._read, args=(parent, process), name="encoder-replies", daemon=True).start()

    def _read(self, conn, process) -> None:
        """Hand each reply to the calls waiting for it; when the child is gone, fail whatever still waits."""
        while True:
            try:
                kind, results, payload = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "ok":
                self.forward_passes += 1
                notify_batch_listeners(int(payload))
                for rid, vectors in results:
                    _, future = self._pending.pop(rid, (None, None))
                    if future is not None:
                        future.set_result(vectors)
            else:
                for rid in results:
                    _, future = self._pending.pop(rid, (None, None))
                    if future is not None:
                        future.set_exception(RuntimeError(f"the encoder failed: {payload}"))
        with self._lock:
            if self._conn is conn:  # not replaced already by a restart
                self._conn = self._process = None
            orphans = [rid for rid, (sent_on, _) in self._pending.items() if sent_on is conn]
            futures = [self._pending.pop(rid)[1] for rid in orphans]
        for future in futures:
            future.set_exception(EncoderUnavailable(f"the encoder process exited (exit code {process.exitcode})"))
        conn.close()

    # -- calls ----------------------------------------------------------------------------------
    def _send(self, texts: list[str], batch_size: int) -> Future:
        future: Future = Future()
        with self._lock:
            if self._closed:
                raise EncoderUnavailable("the encoder is closed")
            if self._conn is None:
                self._start()
            rid = next(self._ids)
            self._pending[rid] = (self._conn, future)
            try:
                self._conn.send((rid, texts, batch_size))
            except (OSError, ValueError) as exc:  # the child is gone; the reader fails the rest
                self._pending.pop(rid, None)
                raise EncoderUnavailable(f"the encoder process is gone: {exc}") from exc
        return future

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        return self.encode_later(texts, batch_size)()

    def encode_later(self, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
        """Send ``texts`` to the child now; the call returned waits for their vectors (``encode`` at once).

        The calling thread is free until it waits: serving reads the question's words meanwhile.
        """
        if not texts:
            return lambda: np.zeros((0, self.dimension), dtype=np.float32)
        texts = list(texts)
        try:
            future: Future | None = self._send(texts, int(batch_size))
        except EncoderUnavailable:
            if self._closed:
                raise
            future = None  # the child is gone: wait() sends again on a fresh one

        def wait() -> np.ndarray:
            if future is not None:
                try:
                    return np.asarray(future.result(), dtype=np.float32)
                except EncoderUnavailable:
                    if self._closed:
                        raise
            logger.warning("the encoder process is gone; encoding again on a fresh one")
            return np.asarray(self._send(texts, int(batch_size)).result(), dtype=np.float32)

        return wait

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def close(self, timeout: float = 5.0) -> None:
        """Close the pipe; the child sees it and exits (calls still waiting fail)."""
        with self._lock:
            self._closed = True
            conn, process = self._conn, self._process
            self._conn = self._process = None
        if conn is not None:
            conn.close()
        if process is not None:
            process.join(timeout)
            if process.is_alive():
                process.kill()
                process.join(5)  # reaped: no zombie left behind
