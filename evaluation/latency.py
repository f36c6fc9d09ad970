"""Timing a routing method as serving runs a request: ``measure_latency``.

One query at a time, at the serving thread count: the bare encoder (``embed_p50_ms``), then a request
as served (``route_p50_ms``): the question sent to the encoder's child process while the method reads
its words (``Served.read``), then the method on the vector.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


def bare_encoder(encoder: Any) -> Any:
    """The sentence encoder under any micro-batching or caching wrapper (``MicroBatchingEncoder.inner``).

    The wrapper waits up to ``encoders.registry.MAX_WAIT_MS`` for company and answers repeated texts from its
    cache: both belong to serving under load, not to the cost of routing one question.
    """
    while getattr(encoder, "inner", None) is not None:
        encoder = encoder.inner
    return encoder


@dataclass
class Served:
    """A routing method timed as serving runs it: ``read(text)`` while the encoder works (None: nothing to read
    without the vector), then ``finish(vector, text, what read returned)``."""

    finish: Callable[[np.ndarray, str, Any], Any]
    read: Callable[[str], Any] | None = None


def measure_latency(
    texts: list[str], methods: dict[str, Callable[[np.ndarray, str], Any] | Served], model: str, threads: int = 1, warmup: list[str] | None = None,
) -> dict[str, Any]:
    """p50 per query of the bare encoder alone and of a request through encoder + each method, one query at a time.

    ``route_p50_ms`` is a request's wall time as served (see the module), ``method_p50_ms`` the
    method's own, ``embed_p50_ms`` the bare encoder's, at ``threads``; ``warmup`` texts run first, untimed.
    """
    import torch
    from threadpoolctl import threadpool_limits

    from encoders import get_encoder

    previous = torch.get_num_threads()  # before the encoder: a torch encoder sets the process's thread count
    encoder = bare_encoder(get_encoder(model, threads))
    served = {name: fn if isinstance(fn, Served) else Served((lambda f: lambda v, t, _: f(v, t))(fn)) for name, fn in methods.items()}
    close, send, request = _encoder_elsewhere(encoder, model, threads)
    torch.set_num_threads(threads)
    per_method: dict[str, list[tuple[float, float, float]]] = {name: [] for name in methods}

    def route(method: Served, text: str) -> tuple[float, float]:
        """(wall seconds of the request, the method's own seconds)."""
        t0 = time.perf_counter()
        pending = send([text])
        t_sent = time.perf_counter()
        early = method.read(text) if method.read is not None else None
        t_read = time.perf_counter() - t_sent
        vector = pending()[0]
        t1 = time.perf_counter()
        method.finish(vector, text, early)
        t2 = time.perf_counter()
        return t2 - t0, t_read + (t2 - t1)

    try:
        with threadpool_limits(threads):
            for text in warmup or []:
                encoder.encode([text])
                for method in served.values():
                    route(method, text)
            for text in texts:
                # Each method right after the bare encoder's own call: run one after the other, a
                # method would pay for the caches the previous one (nearest examples sweep every
                # training vector) took, which serving never does.
                for name, method in served.items():
                    t0 = time.perf_counter()
                    encoder.encode([text])
                    embed = time.perf_counter() - t0
                    per_method[name].append((embed, *route(method, text)))
    finally:
        close()
        torch.set_num_threads(previous)
    out: dict[str, Any] = {"embed_p50_ms": float(np.median([e * 1000 for times in per_method.values() for e, _, _ in times])), "threads": threads, "queries": len(texts),
                           "warmup": len(warmup or []), "encoder": type(encoder).__name__,
                           "request": request}
    for name, times in per_method.items():
        e, r, m = (np.array(column) * 1000 for column in zip(*times, strict=True))
        out[name] = {"route_p50_ms": float(np.median(r)), "method_p50_ms": float(np.median(m)), "embed_p50_ms": float(np.median(e))}
    return out


def _encoder_elsewhere(encoder: Any, model: str, threads: int) -> tuple[Callable[[], None], Callable[[list[str]], Callable[[], np.ndarray]], str]:
    """(how to stop it, how a request sends its question, which): the sentence encoder in a child process, as served.

    An encoder that is no model a child can load (a test's stand-in) runs on one worker thread instead.
    """
    from concurrent.futures import ThreadPoolExecutor

    from encoders.onnx_encoder import OnnxEncoder
    from encoders.process import ProcessEncoder
    from encoders.torch_encoder import SentenceTransformerEncoder

    if isinstance(encoder, (SentenceTransformerEncoder, OnnxEncoder)):
        child = ProcessEncoder(model, threads=threads, max_batch=1, max_wait_ms=0.0)
        return child.close, child.encode_later, "encoder child process (as served)"
    pool = ThreadPoolExecutor(1, thread_name_prefix="encoder")
    return pool.shutdown, (lambda texts: pool.submit(encoder.encode, texts).result), "encoder worker thread"
