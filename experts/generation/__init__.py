"""Generation backends behind one Protocol, chosen by the ``GENERATOR`` setting."""

from .base import (
    AdapterError,
    AdapterMismatch,
    AdapterRef,
    GenerationBusy,
    GenerationError,
    GenerationRequest,
    GenerationTimeout,
    GenerationUnavailable,
    Generator,
    stream_by_words,
)
from .registry import get_fallback_generator, get_generator

__all__ = [
    "AdapterError",
    "AdapterMismatch",
    "AdapterRef",
    "GenerationBusy",
    "GenerationError",
    "GenerationRequest",
    "GenerationTimeout",
    "GenerationUnavailable",
    "Generator",
    "get_fallback_generator",
    "get_generator",
    "stream_by_words",
]
