"""Concurrent one-text encodes sharing one forward pass in this process, with a cache of recent vectors."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future

import numpy as np

from .base import Encoder, encode_later, notify_batch_listeners

logger = logging.getLogger(__name__)


class MicroBatchingEncoder:
    """Wraps an encoder so that concurrent one-text ``encode`` calls share one forward pass.

    A batcher thread takes the first queued text, collects what else arrives within ``max_wait_ms``
    (up to ``max_batch``), runs one pass and hands each caller its row or the exception. Calls with
    several texts go straight to the wrapped encoder; an LRU cache of ``cache_size`` recent vectors
    answers texts seen before. Results equal the unbatched encoder's within float tolerance.
    """

    CACHEABLE_CHARS = 2000  # longer texts are rare repeats and would make the cache's memory unbounded
    BULK_TEXTS = 256  # calls with more texts (indexing, embedding jobs) skip the cache

    def __init__(self, inner: Encoder, max_batch: int = 32, max_wait_ms: float = 2.0, cache_size: int = 0, batch_threads: int = 0):
        self.inner = inner
        # torch threads once the batcher runs (0: leave torch's setting alone); see ``_run``.
        self.batch_threads = max(0, int(batch_threads))
        self.name = inner.name
        self.dimension = inner.dimension
        self.max_batch = max(1, int(max_batch))
        self.max_wait = max(0.0, float(max_wait_ms)) / 1000.0
        self.cache_size = max(0, int(cache_size))
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._cache_lock = threading.Lock()
        # Not ``queue.SimpleQueue``: its ``get`` with a timeout that runs out while it re-checks waits forever on
        # CPython 3.11 and 3.12 (it re-acquires its lock with the negative time left); ``queue.Queue`` raises Empty.
        self._queue: queue.Queue[tuple[str, Future] | None] = queue.Queue()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.forward_passes = 0  # batcher passes, for tests and metrics
        self.cache_hits = 0
        self.cache_misses = 0

    # -- public ---------------------------------------------------------------------------------
    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        bulk = len(texts) > self.BULK_TEXTS  # an embedding job: nothing to share, nothing worth remembering
        if bulk and not self._cache:
            return self.inner.encode(texts, batch_size=batch_size)
        # A bulk call still reuses what is cached: router training's fast tier embeds the documents'
        # sentences that the index jobs of this worker have just embedded for the chunks' payloads.
        rows: list[np.ndarray | None] = [self._cached(t, count=not bulk) for t in texts]
        missing: dict[str, list[int]] = {}  # each text encoded once, however often it recurs (overlapping chunks)
        for i, row in enumerate(rows):
            if row is None:
                missing.setdefault(texts[i], []).append(i)
        if missing:
            distinct = list(missing)
            if len(distinct) == 1 and not bulk:
                vectors = self._one_later(distinct[0], batch_size)()[None, :]
            else:
                vectors = self.inner.encode(distinct, batch_size=batch_size)
            for text, vector in zip(distinct, vectors, strict=True):
                for i in missing[text]:
                    rows[i] = vector
                if not bulk:
                    self._remember(text, vector)
        return np.stack(rows).astype(np.float32, copy=False)

    def encode_later(self, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
        """Start encoding one text where it is encoded elsewhere (the batcher thread, the encoder child); the call returned waits.

        Anything else (several texts, an in-process encoder without a batcher) is encoded when the
        call is made: the same vectors, without the overlap.
        """
        if len(texts) != 1:
            return lambda: self.encode(texts, batch_size)
        text = texts[0]
        cached = self._cached(text)
        if cached is not None:
            return lambda: np.array(cached, dtype=np.float32)[None, :]
        wait = self._one_later(text, batch_size)

        def remembered() -> np.ndarray:
            vector = np.asarray(wait(), dtype=np.float32)
            self._remember(text, vector)
            return vector[None, :]

        return remembered

    def close(self, timeout: float = 5.0) -> None:
        """Stop the batcher thread after the texts already queued; later calls encode directly."""
        with self._start_lock:
            self._closed = True
            thread = self._thread
            if thread is not None and thread.is_alive():
                self._queue.put(None)
        if thread is not None:
            thread.join(timeout)

    # -- cache ----------------------------------------------------------------------------------
    def _cached(self, text: str, count: bool = True) -> np.ndarray | None:
        """The cached vector of ``text``, if any; ``count``: in the hit and miss counts (serving's, not a bulk job's)."""
        if not self.cache_size:
            return None
        with self._cache_lock:
            vector = self._cache.get(text)
            if vector is None:
                self.cache_misses += count
                return None
            self._cache.move_to_end(text)
            self.cache_hits += count
            return vector

    def _remember(self, text: str, vector: np.ndarray) -> None:
        if not self.cache_size or len(text) > self.CACHEABLE_CHARS:
            return
        vector = np.array(vector, dtype=np.float32)  # a copy: callers may change what they got
        vector.setflags(write=False)
        with self._cache_lock:
            self._cache[text] = vector
            self._cache.move_to_end(text)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)

    # -- batching -------------------------------------------------------------------------------
    def _one_later(self, text: str, batch_size: int) -> Callable[[], np.ndarray]:
        """One uncached text on its way, the call returned waiting for its (dim,) vector: queued for the
        batcher where there is one, else sent to the wrapped encoder (at once where it works elsewhere)."""
        future = self._queued(text) if self.max_batch > 1 else None
        if future is not None:
            return future.result
        waiting = encode_later(self.inner, [text], batch_size)
        return lambda: waiting()[0]

    def _queued(self, text: str) -> Future | None:
        """Queue ``text`` for the batcher (started if need be) and return its future; None once closed."""
        future: Future = Future()
        # Under the lock so that nothing is queued behind close()'s stop marker.
        with self._start_lock:
            if self._closed:
                return None
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="encoder-batcher", daemon=True)
                self._thread.start()
            self._queue.put((text, future))
        return future

    def _collect(self, first: tuple[str, Future]) -> tuple[list[tuple[str, Future]], bool]:
        """The first item and whatever joins it within the wait (and whether a stop was seen)."""
        batch = [first]
        deadline = time.monotonic() + self.max_wait
        while len(batch) < self.max_batch:
            remaining = deadline - time.monotonic()
            try:
                item = self._queue.get(timeout=remaining) if remaining > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _run(self) -> None:
        if self.batch_threads:
            # torch's thread count is process-wide; the batcher runs only in a serving process, where the
            # encoder is the only torch user, so its batched passes may use the cores (ENCODER_THREADS).
            try:
                import torch

                torch.set_num_threads(self.batch_threads)
            except Exception:  # never let a thread setting stop the batcher
                logger.exception("could not set the encoder's torch threads")
        stop = False
        while not stop:
            first = self._queue.get()
            if first is None:
                break
            batch, stop = self._collect(first)
            self._forward(batch)

    def _forward(self, batch: list[tuple[str, Future]]) -> None:
        live = [(t, f) for t, f in batch if f.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            vectors = self.inner.encode([t for t, _ in live], batch_size=len(live))
        except BaseException as exc:  # every waiting caller gets the failure, the batcher lives on
            for _, future in live:
                future.set_exception(exc)
            return
        self.forward_passes += 1
        notify_batch_listeners(len(live))
        for (_, future), vector in zip(live, vectors, strict=True):
            future.set_result(vector)
