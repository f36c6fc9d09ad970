"""The generator interface (the backends themselves are chosen in ``registry``).

A backend turns a ``GenerationRequest`` into an ``Answer`` (``generate``) or a stream of deltas ending
with it (``stream``). ``GenerationError``: serving answers extractively (or fails over);
``AdapterError``: an earlier adapter or the base model can still answer; ``GenerationBusy`` is not a
failure: come back after ``retry_after_s``.
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
    names the LoRA adapter to answer with (None: the base model or no model at all);
    ``timeout_s`` is the time budget of the whole generation, waiting for the model included
    (None: the backend's own).
    """

    question: str
    expert: str
    passages: list[Passage]
    search_question: str = ""  # the question as searched (spell-corrected); the extractive answer picks sentences for it
    history: list[dict[str, str]] = field(default_factory=list)
    system_prompt: str = ""
    citation_format: str = "[{index}]"
    adapter: AdapterRef | None = None
    max_tokens: int | None = None
    temperature: float = 0.0
    timeout_s: float | None = None
    # The question's vector where routing made it with another encoder than the generators' (the
    # fast tier; the question as written, when the search corrected its spelling): the extractive
    # answer reads it instead of paying for the sentence encoder.
    question_vector: list[float] | None = None


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


class AdapterError(GenerationError):
    """The request's adapter cannot be used (not on this base model, unreadable): another adapter or none may answer."""

    kind = "adapter_unavailable"


class AdapterMismatch(AdapterError):
    kind = "adapter_mismatch"


class GenerationBusy(Exception):
    """The backend's queue is full: not a failure of the expert, the client should retry after ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int = 1):
        self.retry_after_s = max(1, int(retry_after_s))
        super().__init__(message)


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
