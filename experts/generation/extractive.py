"""The default backend: an extractive, cited answer, no language model needed."""

from __future__ import annotations

from collections.abc import Iterator

from django.conf import settings

from experts.ml.extractive import Answer, extractive_answer
from sbcommon.encoders import get_encoder

from .base import GenerationRequest, stream_by_words


class ExtractiveGenerator:
    """Assembles the answer from the passages' best sentences (see ``experts.ml.extractive``)."""

    name = "extractive"

    def generate(self, request: GenerationRequest) -> Answer:
        encoder = get_encoder()
        return extractive_answer(
            request.question, request.passages, encoder.encode, min_score=settings.EXTRACTIVE_MIN_SCORE
        )

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        return stream_by_words(self.generate(request))
