"""The answers of an answers run: the extractive generator's, and the LMs' batched, with what the serving backend
does around the model (``Serving``: the passages it shows, when it does not call the model, its stops and parsing)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from evaluation.answers_config import AnswerConfig, Say
from evaluation.answers_corpus import Question
from experts.ml.answer_metrics import is_abstention
from experts.ml.extractive import ChunkSentenceCache, Passage, extractive_answer
from experts.ml.prompting import DEFAULT_CITATION_FORMAT, parse_answer


@dataclass
class Answered:
    """One generator's answer to one question, as it is scored."""

    text: str  # "" for an abstention
    citations: list[Passage]
    ms: float
    new_tokens: int = 0
    raw: str = ""  # what the model wrote, before parsing
    sentence_score: float | None = None  # the extractive scorer's score of the best sentence (extractive answers)


class Serving:
    """What the serving LLM backend does around the model (``experts.generation.transformers``), for batched use.

    The passages it shows (``prompt_passages``), when it does not call the model at all (weak
    retrieval), its token limit, stops and answer parsing.
    """

    def __init__(self, max_new_tokens: int | None):
        from experts.generation.transformers import TransformersGenerator

        self.generator = TransformersGenerator.from_settings()
        self.max_new_tokens = int(max_new_tokens or self.generator.max_tokens)

    def shown(self, question: str, passages: list[Passage]) -> list[Passage]:
        from experts.generation.base import GenerationRequest

        return self.generator.prompt_passages(GenerationRequest(question=question, expert="", passages=passages))

    def weak(self, passages: list[Passage]) -> bool:
        return not passages or max(p.score for p in passages) < self.generator.min_score

    @property
    def stops(self) -> tuple[str, ...]:
        from experts.ml.prompting import STOPS

        return STOPS + (("\n\n",) if self.generator.stop_at_paragraph else ())

    def parse(self, text: str, question: str, passages: list[Passage]) -> Any:
        from experts.ml.prompting import STOPS

        return parse_answer(text, passages[: self.generator.max_passages], citation_format=DEFAULT_CITATION_FORMAT, min_score=self.generator.min_score,
                            question=question, stops=STOPS, stop_at_paragraph=self.generator.stop_at_paragraph)


def extractive_answers(questions: list[Question], modes: list[str], known: dict[str, dict[str, np.ndarray]], ctx: dict[str, Any]) -> dict[str, list[Answered]]:
    """The extractive generator's answers (``experts.ml.extractive``, as ``ExtractiveGenerator`` calls it).

    ``known``: by mode, each question's vector (``fast``: the fast tier's, as serving hands it over).
    """
    from encoders import get_encoder

    encoder = get_encoder(ctx["model"], ctx["threads"])
    cache = ChunkSentenceCache(size=100_000)
    out: dict[str, list[Answered]] = {}
    for mode in modes:
        vectors = known[mode]

        def embed(texts: list[str], vectors: dict[str, np.ndarray] = vectors) -> np.ndarray:
            if len(texts) == 1 and texts[0] in vectors:  # the question (its embedding is cached); sentences come from the index
                return vectors[texts[0]][None, :]
            return encoder.encode(texts)

        rows = []
        for q in questions:
            t0 = time.perf_counter()
            answer = extractive_answer(q.text, q.passages[mode], embed, min_score=ctx["min_score"], max_sentences=ctx["max_sentences"], cache=cache,
                                       scorer=ctx["scorer_spec"])
            best = answer.selection["quoted"][0]["score"] if answer.selection and answer.selection.get("quoted") else None
            rows.append(Answered(answer.text if answer.grounded else "", answer.citations, (time.perf_counter() - t0) * 1000, raw=answer.text,
                                  sentence_score=best))
        out[mode] = rows
    return out


def generate_answers(generator: str, lm: Any, tokenizer: Any, questions: list[Question], modes: list[str], adapters: set[str],
              serving: Serving, config: AnswerConfig, say: Say) -> dict[str, list[Answered]]:
    """One LM generator's answers in every mode, batched; a prompt shared by two modes is generated once."""
    from experts.ml.batch_generation import BatchItem, BatchStats, generate_batch
    from experts.ml.lora_examples import Example

    items: list[Any] = []
    index: dict[tuple[Any, ...], int] = {}
    plan: dict[str, list[int | None]] = {}
    for mode in modes:
        plan[mode] = []
        for q in questions:
            passages = q.passages[mode]
            if serving.weak(passages):  # serving answers "not found" without calling the model
                plan[mode].append(None)
                continue
            adapter = q.adapter[mode] if generator == "lora" and q.adapter[mode] in adapters else None
            key = (q.row, tuple(p.chunk_id for p in passages), adapter)
            if key not in index:
                index[key] = len(items)
                items.append(BatchItem(Example(q.text, "", serving.shown(q.text, passages), whole=passages[: serving.generator.max_passages]), adapter=adapter))
            plan[mode].append(index[key])
    shared = sum(1 for rows in plan.values() for j in rows if j is not None) - len(items)
    say(f"  generating {len(items)} answers with {generator} ({shared} prompts shared between modes)")
    stats = BatchStats()
    room = int(getattr(lm.config, "max_position_embeddings", 2048)) - serving.max_new_tokens  # as serving fits the prompt
    generated = generate_batch(lm, tokenizer, items, max_new_tokens=serving.max_new_tokens, prompt_tokens=room,
                               batch_size=config.batch_size, stop_strings=serving.stops, stats=stats,
                               select=serving.generator.decoding == "select",
                               scorer=serving.generator.sentence_scorer())
    say(f"    {stats.new_tokens} tokens in {stats.wall_s:.0f} s ({stats.tokens_per_s:.1f} tokens/s)")
    out: dict[str, list[Answered]] = {}
    for mode in modes:
        rows = []
        for q, j in zip(questions, plan[mode], strict=True):
            if j is None:
                rows.append(Answered("", [], 0.0))
                continue
            parsed = serving.parse(generated[j].text, q.text, q.passages[mode])
            text = "" if not parsed.grounded or is_abstention(parsed.text) else parsed.text
            rows.append(Answered(text, parsed.citations if text else [], generated[j].ms, generated[j].new_tokens, generated[j].text))
        out[mode] = rows
    return out
