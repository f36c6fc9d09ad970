"""The process's encoder (``get_encoder``): one per model, micro-batched here or in an encoder child process."""

from __future__ import annotations

import atexit
import os
import threading

from django.conf import settings

from .backends import make_encoder
from .base import Encoder
from .batching import MicroBatchingEncoder
from .disk_cache import DiskCachedEncoder
from .process import ProcessEncoder
from .space import embedding_space, model_name, resolve_backend

# A serving process's encoder (``get_encoder``): concurrent one-text encodes share one forward pass of up
# to MAX_BATCH texts, waiting at most MAX_WAIT_MS for company, and the vectors of the last CACHE_SIZE
# texts are kept (passage sentences recur in every answer; ~1.6 KB each). Set when the micro-batcher was
# built and kept through every `bench serving` run on the demo since (docs/EVALUATIONS.md#bench-serving),
# not tuned one by one; the spawned encoder child gets them as arguments.
MAX_BATCH = 32
MAX_WAIT_MS = 2.0
CACHE_SIZE = 20000


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def serving_threads(default: int | None = None) -> int:
    """torch threads of the micro-batcher's forward passes: ``ENCODER_THREADS``; 0 (the default) means
    ``default`` (``TORCH_THREADS`` unless given), -1 every CPU of the process."""
    setting = int(settings.ENCODER_THREADS)
    if setting < 0:
        return cpu_count()
    return setting if setting > 0 else max(1, int(default if default is not None else settings.TORCH_THREADS))


def cache_counts() -> tuple[int, int]:
    """(hits, misses) of the vector caches of the encoders this process has loaded (none loaded: zeros)."""
    loaded = list(_encoders.values())
    return (sum(int(getattr(e, "cache_hits", 0)) for e in loaded), sum(int(getattr(e, "cache_misses", 0)) for e in loaded))


_encoders: dict[tuple[str, int, str], Encoder] = {}
_encoders_lock = threading.Lock()


def get_encoder(name: str | None = None, threads: int | None = None) -> Encoder:
    """The process-wide encoder for ``name`` (default: settings.EMBEDDING_MODEL), micro-batched.

    One instance per (model, threads), made under a lock: when a server starts, many request
    threads ask at once, and each would otherwise load its own copy of the model.
    ``MAX_BATCH``, ``MAX_WAIT_MS`` and ``CACHE_SIZE`` configure the wrapper.
    """
    threads = settings.TORCH_THREADS if threads is None else threads
    name = model_name(name or settings.EMBEDDING_MODEL)  # an embedding space's name loads its model: one encoder per model, not per alias
    key = (name, int(threads), resolve_backend())
    encoder = _encoders.get(key)
    if encoder is not None:
        return encoder
    with _encoders_lock:
        encoder = _encoders.get(key)
        if encoder is None:
            encoder = _build_encoder(name, int(threads))
            if settings.EMBEDDING_DISK_CACHE:
                encoder = DiskCachedEncoder(encoder, settings.EMBEDDING_DISK_CACHE, embedding_space(name))
            _encoders[key] = encoder
    return encoder


def bulk_threads() -> int:
    """Threads of a batch job's encoder (indexing documents, embedding an imported log): every CPU of the process, where
    a serving encoder keeps to ``TORCH_THREADS`` for latency. A job runs alone in its worker (``--pool=solo``), whose
    other cores would otherwise idle; ``get_encoder(threads=bulk_threads())`` is the same model with the same vectors."""
    return cpu_count()


def _build_encoder(name: str, threads: int) -> Encoder:
    if settings.ENCODER_PROCESS:  # serving processes turn it on (``switchboard.asgi``)
        # The child process encodes with the serving thread count and batches; this process only caches.
        bare: Encoder = ProcessEncoder(name, threads=serving_threads(default=threads) if threads > 0 else threads,
                                       max_batch=MAX_BATCH, max_wait_ms=MAX_WAIT_MS)
        atexit.register(bare.close)
        cached = MicroBatchingEncoder(bare, max_batch=1, cache_size=CACHE_SIZE)
        atexit.register(cached.close)
        return cached
    # In process (batch jobs, commands), calls are long: their passes run side by side, one CPU each (``OnnxEncoder``).
    batched = MicroBatchingEncoder(make_encoder(name, threads=threads, parallel=True), max_batch=MAX_BATCH, max_wait_ms=MAX_WAIT_MS,
                                   cache_size=CACHE_SIZE, batch_threads=serving_threads(default=threads) if threads > 0 else 0)
    atexit.register(batched.close)
    return batched
