"""Generation backends behind one Protocol, chosen by the ``GENERATOR`` setting."""

from .base import GenerationRequest, Generator, get_generator

__all__ = ["GenerationRequest", "Generator", "get_generator"]
