"""Generation backends behind one Protocol, chosen by the ``GENERATOR`` setting."""

from .base import (
    AdapterRef,
    GenerationError,
    GenerationRequest,
    GenerationTimeout,
    GenerationUnavailable,
    Generator,
    get_generator,
    stream_by_words,
)

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
