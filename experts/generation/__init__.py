"""Generation backends behind one Protocol, chosen by the ``GENERATOR`` setting."""

from .base import (
    AdapterRef,
    GenerationError,
    GenerationRequest,
    GenerationTimeout,
    GenerationUnavailable,
    Generator,
    stream_by_words,
)
from .registry import get_generator

__all__ = [
    "AdapterRef",
    "GenerationError",
    "GenerationRequest",
    "GenerationTimeout",
    "GenerationUnavailable",
    "Generator",
    "get_generator",
    "stream_by_words",
]
