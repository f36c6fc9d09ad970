"""What every sentence encoder is and shares: the Protocol, its failure, the size of a forward pass,
``encode_later`` and the listeners told of every batched pass (metrics)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

import numpy as np

logger = logging.getLogger(__name__)

# Texts per forward pass at most: a call's texts are sorted by length and run in passes of this many,
# which pads less than one long pass (demo questions; docs/CONFIGURATION.md).
SUB_BATCH = 8


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    name: str
    dimension: int

    def encode(self, texts: list[str], batch_size: int = 64) -> np.ndarray: ...


class EncoderUnavailable(RuntimeError):
    """The encoder's process died and could not be started again."""


def encode_later(encoder: Encoder, texts: list[str], batch_size: int = 64) -> Callable[[], np.ndarray]:
    """Start encoding ``texts``; the call returned waits for their vectors.

    Serving encodes in the encoder child or the batcher thread (``encode_later`` on them), so the
    request thread is free while the vector is made; any other encoder encodes when the call is made.
    """
    later = getattr(encoder, "encode_later", None)
    if later is not None:
        return later(texts, batch_size)
    return lambda: encoder.encode(texts, batch_size=batch_size)


_batch_listeners: list[Callable[[int], None]] = []


def add_batch_listener(listener: Callable[[int], None]) -> None:
    """Call ``listener(batch_size)`` after every micro-batched forward pass (metrics use it)."""
    if listener not in _batch_listeners:
        _batch_listeners.append(listener)


def notify_batch_listeners(size: int) -> None:
    """Tell every listener that a forward pass of ``size`` texts ran (batching.py and process.py call it)."""
    for listener in list(_batch_listeners):
        try:
            listener(size)
        except Exception:  # a metrics hook must never break encoding
            logger.exception("encoder batch listener failed")
