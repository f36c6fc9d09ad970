"""The generator interface (the backends themselves are chosen in ``registry``).

Every backend turns a ``GenerationRequest`` into an ``Answer`` (``generate``) or into a stream of
text deltas ending with the final ``Answer`` (``stream``). Backends raise ``GenerationError``
(or a subclass) for anything the caller should treat as "this expert is down or unsure": the
serving path then records a failure on the expert's circuit breaker and fails over to the next one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from experts.ml.extractive import Answer, Passage


@dataclass
class GenerationRequest:
    """What a generator needs: the question, the expert answering and the retrieved passages.

    ``history`` holds the earlier turns of the conversation ([{"role", "content"}], oldest first);
    ``system_prompt`` and ``citation_format`` come from the expert's serving version; ``adapter``
    names the LoRA adapter to answer with (None: the base model or no model at all).
    """

    question: str
    expert: str
    passages: list[Passage]
    history: list[dict[str, str]] = field(default_factory=list)
    system_prompt: str = ""
    citation_format: str = "[{index}]"
    adapter: AdapterRef | None = None
    max_tokens: int | None = None
    temperature: float = 0.0


@dataclass(frozen=True)
class AdapterRef:
    """One servable LoRA adapter: the expert it belongs to, its served name, its folder and base model."""

    expert: str
    name: str
    path: str
    base_model: str
    version: int


class GenerationError(Exception):
    """The backend could not answer (down, timed out, answered garbage): fail over to the next expert."""

    kind = "generator_error"


class GenerationTimeout(GenerationError):
    kind = "generator_timeout"


class GenerationUnavailable(GenerationError):
    kind = "generator_unavailable"


class Generator(Protocol):
    """Turns a question and passages into a cited answer."""

    name: str

    def generate(self, request: GenerationRequest) -> Answer: ...

    def stream(self, request: GenerationRequest) -> Iterator[str | Answer]:
        """Text deltas as they are produced, then the final ``Answer`` as the last item."""
        ...


def stream_by_words(answer: Answer, words_per_chunk: int = 4) -> Iterator[str | Answer]:
    """A stream for backends that produce the whole answer at once: word groups, then the answer."""
    words = answer.text.split(" ")
    for i in range(0, len(words), words_per_chunk):
        chunk = " ".join(words[i : i + words_per_chunk])
        yield chunk if i == 0 else " " + chunk
    yield answer
