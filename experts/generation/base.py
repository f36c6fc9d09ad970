"""The generator interface and the backend registry."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

from experts.ml.extractive import Answer, Passage


@dataclass
class GenerationRequest:
    """What a generator needs: the question, the expert answering and the retrieved passages."""

    question: str
    expert: str
    passages: list[Passage]


class Generator(Protocol):
    """Turns a question and passages into a cited answer."""

    name: str

    def generate(self, request: GenerationRequest) -> Answer: ...


@lru_cache(maxsize=1)
def get_generator(name: str | None = None) -> Generator:
    """The configured backend (``GENERATOR``); unknown names fail at start, not per request."""
    from django.conf import settings

    name = name or settings.GENERATOR
    if name == "extractive":
        from .extractive import ExtractiveGenerator

        return ExtractiveGenerator()
    raise ValueError(f"GENERATOR={name!r} is not available; known backends: extractive")
