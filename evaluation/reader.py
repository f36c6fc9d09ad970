"""``manage.py train_reader``: the extractive answer's reader (``experts.ml.reader``), trained on doc2dial and measured.

Candidates come from each question's gold document, not from a replay of the product (``evaluate
sentences`` replays it, minutes of ingestion and a chat turn per question): the document chunked as the
product chunks it (``knowledge.points.chunk_document`` with an expert's default sizes), its chunks ranked
by the encoder's cosine with the question (``embedding_text``: title and chunk, as indexed), the first
``MAX_PASSAGES`` given to ``extractive.candidate_sentences``; the shipped scorer orders their sentences and
each gets its token F1 against the gold answer, as ``evaluate sentences`` computes it. The reader is
fitted on the train questions' first ``TRAIN_SHORTLIST`` sentences and measured, int8 as served, on
validation and test against the scorer (``reader_figures``): the pick's F1 and how often the pick is the
best candidate, for each shortlist size in ``SHORTLISTS``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.datasets import carve_validation, stratified_sample, validation_note
from evaluation.workspace import Dataset
from experts.ml.answer_metrics import token_f1
from experts.ml.extractive import MAX_PASSAGES, ChunkSentenceCache, Passage, candidate_sentences, quoted
from experts.ml.reader import LAYERS, LEARNING_RATE, MAX_LENGTH, TEMPERATURE, ReaderGroup, SentenceReader, fit_reader, pick
from experts.ml.sentence_scorer import load_scorer

Say = Callable[[str], Any]
TRAIN_SHORTLIST = 6  # the scorer's first sentences each train question teaches the reader to choose among (set, not tuned)
SHORTLISTS = (1, 2, 3, 5)  # reported shortlist sizes (1: the scorer's own pick)
SEED = 0


@dataclass
class Candidates:
    """One question's candidate sentences, best first by the shipped scorer, with their F1 against the gold answer."""

    question: str
    sentences: list[str]  # as the passage has them (what the reader reads)
    f1: np.ndarray


def answered(data: Dataset, train_limit: int | None) -> tuple[dict[str, list[dict[str, Any]]], dict[str, Any]]:
    """The train, val and test questions with a gold answer, train cut to a stratified ``train_limit``, and where the
    validation ones came from (``validation_note``): a dataset without a val split gives a seeded, stratified 10% of
    its train questions (``carve_validation``). ValueError without train questions, or too few to carve from."""
    rows = {split: [q for q in data.questions(split) if q.get("answer")] for split in ("train", "val", "test")}
    carved = not rows["val"]
    if carved and rows["train"]:
        held = carve_validation([q["domain"] for q in rows["train"]], np.ones(len(rows["train"]), dtype=bool), seed=SEED)
        rows["val"] = [q for q, h in zip(rows["train"], held, strict=True) if h]
        rows["train"] = [q for q, h in zip(rows["train"], held, strict=True) if not h]
    if not rows["train"] or not rows["val"]:
        raise ValueError(f"{data.name} needs train questions with an 'answer' and a domain (and a val split, or enough train ones to carve one)")
    if train_limit and len(rows["train"]) > train_limit:
        rows["train"] = [rows["train"][j] for j in stratified_sample([q["domain"] for q in rows["train"]], train_limit, seed=SEED)]
    return rows, validation_note(carved, seed=SEED)


def gold_candidates(data: Dataset, questions: Sequence[dict[str, Any]], encode: Callable[[list[str]], np.ndarray],
                    say: Say = print) -> list[Candidates]:
    """Each question's candidates from its gold document (see the module docstring); questions without a gold
    document or a sentence are left out."""
    from knowledge.points import chunk_document, embedding_text

    scorer = load_scorer(None)
    docs = {d["doc_id"]: d for d in data.documents}
    chunks: dict[str, tuple[list[Passage], np.ndarray]] = {}
    cache = ChunkSentenceCache(size=100_000)
    out = []
    for n, q in enumerate(questions):
        gold = [docs[d] for d in sorted(data.relevant.get(q["query_id"], ())) if d in docs]
        if not gold:
            continue
        doc = gold[0]
        if doc["doc_id"] not in chunks:
            pieces = chunk_document(doc["title"], doc["text"], 1000, 150)
            passages = [Passage(text=c.text, title=title, chunk_id=f"{doc['doc_id']}#{i}") for i, (c, title) in enumerate(pieces)]
            chunks[doc["doc_id"]] = (passages, np.asarray(encode([embedding_text(title, c.text) for c, title in pieces])))
        passages, vectors = chunks[doc["doc_id"]]
        order = np.argsort(-(vectors @ np.asarray(encode([q["text"]]))[0]), kind="stable")[:MAX_PASSAGES]
        found = candidate_sentences(q["text"], [passages[i] for i in order], encode, cache)
        if found is None:
            continue
        candidates, features = found
        ranked = np.argsort(-scorer.score(features), kind="stable")
        sentences = [candidates[i][2] for i in ranked]
        out.append(Candidates(q["text"], sentences, np.array([token_f1(quoted(s), q["answer"]) for s in sentences])))
        if (n + 1) % 500 == 0:
            say(f"  candidates: {n + 1}/{len(questions)} questions")
    return out


def reader_figures(items: Sequence[Candidates], read: Callable[[str, list[str]], np.ndarray] | None,
                   shortlists: Sequence[int] = SHORTLISTS) -> dict[str, Any]:
    """The pick's mean F1 and how often it is the best candidate (ties count; questions whose best candidate has
    some F1), for the scorer alone and for the reader over each shortlist size; ``read`` None: the scorer's only."""
    widest = max(shortlists)
    scores = [read(c.question, c.sentences[:widest]) if read is not None and len(c.sentences) > 1 else None for c in items]
    answerable = [j for j, c in enumerate(items) if len(c.f1) and c.f1.max() > 0]

    def figures(k: int | None) -> dict[str, float | None]:
        picks = [pick(range(len(c.sentences)), scores[j] if k else None, k or 1) for j, c in enumerate(items)]
        f1 = [c.f1[p] for c, p in zip(items, picks, strict=True)]
        best = [items[j].f1[picks[j]] >= items[j].f1.max() - 1e-9 for j in answerable]
        return {"picked_f1": rounded(np.mean(f1)) if f1 else None, "pick_is_best": rounded(np.mean(best)) if best else None}

    out: dict[str, Any] = {"n": len(items), "scorer": figures(None), "best_possible": rounded(np.mean([c.f1.max() for c in items])) if items else None}
    if read is not None:
        out["reader"] = {str(k): figures(k) for k in shortlists if k > 1}
    return out


def train_reader(dataset: Path, out: Path, base_path: str, *, train_limit: int | None = None, epochs: int = 1,
                 lr: float = LEARNING_RATE, say: Say = print) -> dict[str, Any]:
    """Build the candidates, fit the reader on the train split, save it in ``out`` and measure it (int8, as served)
    on validation and test next to the shipped scorer; returns the report, which ``out``'s ``reader.json`` also holds."""
    from django.conf import settings

    from encoders import get_encoder

    started = time.perf_counter()
    data = Dataset.read(dataset)
    if not data.documents or not data.relevant:
        raise ValueError(f"{dataset} needs docs.jsonl and qrels.jsonl: the reader reads each question's gold document")
    rows, validation = answered(data, train_limit)
    encoder = get_encoder(settings.EMBEDDING_MODEL, max(1, settings.TORCH_THREADS))
    items = {split: gold_candidates(data, chosen, encoder.encode, say) for split, chosen in rows.items()}
    say("  candidates: " + ", ".join(f"{split} {len(v)}" for split, v in items.items()) + f" ({time.perf_counter() - started:.0f} s)")
    groups = [ReaderGroup(c.question, c.sentences[:TRAIN_SHORTLIST], c.f1[:TRAIN_SHORTLIST]) for c in items["train"]]
    fitted = fit_reader(groups, base_path, epochs=epochs, lr=lr, seed=SEED, say=say)
    report: dict[str, Any] = {
        "base": settings.EMBEDDING_MODEL, "layers": LAYERS, "max_length": MAX_LENGTH, "temperature": TEMPERATURE, "train_shortlist": TRAIN_SHORTLIST,
        "dataset": dataset.name, "fit": fitted.report, "rank_bias": [round(float(b), 4) for b in fitted.rank_bias], "command": f"manage.py train_reader --dataset {dataset} --out {out}"
                                                             + (f" --train-limit {train_limit}" if train_limit else "") + (f" --epochs {epochs}" if epochs != 1 else "") + (f" --lr {lr}" if lr != LEARNING_RATE else ""),
        "validation": validation,
        "candidates": "the gold document's chunks (product chunking), the first three by cosine, ordered by the shipped scorer",
    }
    fitted.save(out, report)
    served = SentenceReader.load(out, base_path, int8=True)
    report["figures"] = {split: reader_figures(items[split], served.score) for split in ("val", "test")}
    report["seconds"] = round(time.perf_counter() - started, 1)
    fitted.save(out, report)
    for split, figures in report["figures"].items():
        say(f"  {split}: scorer {figures['scorer']}; reader " + ", ".join(f"k={k} {v}" for k, v in figures["reader"].items()))
    return report


def rounded(value: float | None) -> float | None:
    """A figure as the reports give it: 4 places (None stays None)."""
    return None if value is None else round(float(value), 4)
