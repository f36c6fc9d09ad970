"""The figures of an answers run: each mode and generator's scores against the gold answers, the paired
differences between them, the issue's targets, the printed table and every answer's row."""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from evaluation.answers_config import Say
from evaluation.answers_corpus import Corpus, Question
from evaluation.answers_generation import Answered
from experts.ml.answer_metrics import paired_difference, rouge_l, support, token_f1
from experts.ml.targets import MIN_SUPPORT


def rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(float(value), digits)


def answer_rows(questions: list[Question], answers: dict[tuple[str, str], list[Answered]], queries: list[dict[str, Any]],
                corpus: Corpus) -> list[dict[str, Any]]:
    """One row per question: its id, text, gold answer and domain, and under ``answers`` each "mode/generator"'s
    answer as scored (``text``: "" when it abstained), what the model gave before parsing (``raw``), its ``f1``
    and its cited ``documents``: the material for comparing two runs question by question."""
    rows = []
    for k, q in enumerate(questions):
        given = {}
        for (mode, generator), answered in sorted(answers.items()):
            a = answered[k]
            given[f"{mode}/{generator}"] = {"text": a.text, "raw": a.raw or a.text, "f1": round(token_f1(a.text, q.gold), 4),
                                            "documents": [corpus.units[p.document_id]["doc_id"] for p in a.citations if p.document_id is not None],
                                            "best_passage_score": round(max((p.score for p in q.passages[mode]), default=0.0), 4),
                                            "gold_in_passages": gold_shown(q, mode),
                                            **({"sentence_score": a.sentence_score} if a.sentence_score is not None else {})}
        rows.append({"query_id": queries[q.row].get("query_id"), "question": q.text, "gold": q.gold, "domain": corpus.domains[q.domain],
                     "adapter": q.adapter.get("auto"), "answers": given})
    return rows


def gold_shown(q: Question, mode: str) -> bool:
    """Whether a passage ``mode`` retrieved for ``q`` holds its gold answer (``support`` at least ``MIN_SUPPORT``)."""
    return any(support(q.gold, p.text) >= MIN_SUPPORT for p in q.passages[mode])


def answer_f1s(questions: list[Question], rows: list[Answered]) -> list[float]:
    """Each answer's token F1 against its question's gold answer."""
    return [token_f1(a.text, q.gold) for q, a in zip(questions, rows, strict=True)]


def score_answers(questions: list[Question], mode: str, rows: list[Answered], units: list[dict[str, Any]]) -> dict[str, Any]:
    f1 = answer_f1s(questions, rows)
    rl = [rouge_l(a.text, q.gold) for q, a in zip(questions, rows, strict=True)]
    abstained = [not a.text for a in rows]
    absent = [not gold_shown(q, mode) for q in questions]
    precisions = [
        sum(1 for p in a.citations if p.document_id is not None and units[p.document_id]["doc_id"] in q.relevant) / len(a.citations)
        for q, a in zip(questions, rows, strict=True) if a.citations and q.relevant
    ]
    ms = [a.ms for a in rows]

    def share(flags: list[bool], where: list[bool]) -> float | None:
        picked = [f for f, w in zip(flags, where, strict=True) if w]
        return round(float(np.mean(picked)), 4) if picked else None

    return {
        "f1": round(float(np.mean(f1)), 4),
        "rouge_l": round(float(np.mean(rl)), 4),
        "citation_precision": round(float(np.mean(precisions)), 4) if precisions else None,
        "abstained": round(float(np.mean(abstained)), 4),
        "p50_ms": round(statistics.median(ms), 1) if ms else None,
        "tokens_per_s": round(sum(a.new_tokens for a in rows) * 1000 / sum(ms), 2) if any(a.new_tokens for a in rows) else None,
        "n": len(rows),
        "cited": round(float(np.mean([bool(a.citations) for a in rows])), 4),
        "absent": round(float(np.mean(absent)), 4),
        "abstained_when_absent": share(abstained, absent),
        "abstained_when_present": share(abstained, [not a for a in absent]),
        "f1_when_present": round(float(np.mean([f for f, a in zip(f1, absent, strict=True) if not a])), 4) if not all(absent) else None,
    }


# The targets' comparisons, as (better, worse) answers to the same questions.
PAIRS = ((("auto", "lora"), ("auto", "extractive")), (("auto", "lora"), ("flat", "lora")), (("auto", "lora"), ("auto", "base")),
         (("auto", "lora"), ("oracle", "lora")), (("auto", "extractive"), ("flat", "extractive")))


def paired_differences(f1: dict[tuple[str, str], list[float]]) -> dict[str, dict[str, float]]:
    """Each of ``PAIRS`` present: the mean per-question F1 difference, its standard error and n.

    Both answers are to the same questions, so the paired difference's standard error (the spread of
    the per-question differences over the square root of their number) says whether a gap between two
    figures of ``results`` is more than the luck of which questions were drawn.
    """
    out: dict[str, dict[str, float]] = {}
    for a, b in PAIRS:
        if not f1.get(a) or not f1.get(b):
            continue
        if len(f1[a]) != len(f1[b]):
            raise ValueError(f"{a} and {b} answered {len(f1[a])} and {len(f1[b])} questions: they cannot be paired")
        mean, se = paired_difference(f1[a], f1[b])
        out[f"{'/'.join(a)} - {'/'.join(b)}"] = {"mean": round(mean, 4), "se": rounded(se), "n": len(f1[a])}
    return out


def compute_targets(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The issue's targets, computed (never asserted here): ratios and whether each holds."""
    def f1(mode: str, generator: str) -> float | None:
        return results.get(mode, {}).get(generator, {}).get("f1")

    out: dict[str, Any] = {}
    auto_lora, auto_base, auto_ext = f1("auto", "lora"), f1("auto", "base"), f1("auto", "extractive")
    flat_lora, oracle_lora = f1("flat", "lora"), f1("oracle", "lora")
    if auto_lora is not None and auto_base:
        out["auto_lora_over_auto_base"] = round(auto_lora / auto_base, 3)
        out["auto_lora_at_least_1.25x_base"] = auto_lora >= 1.25 * auto_base
    if auto_lora is not None and auto_ext is not None:
        out["auto_lora_at_least_extractive"] = auto_lora >= auto_ext
    if auto_lora is not None and flat_lora is not None:
        out["auto_lora_above_flat_lora"] = auto_lora > flat_lora
    if auto_lora is not None and oracle_lora:
        out["auto_lora_over_oracle_lora"] = round(auto_lora / oracle_lora, 3)
        out["auto_lora_at_least_80pct_oracle"] = auto_lora >= 0.8 * oracle_lora
    return out


def say_table(results: dict[str, dict[str, Any]], say: Say) -> None:
    say(f"  {'mode':8s} {'generator':10s} {'F1':>6s} {'ROUGE-L':>8s} {'cite P':>7s} {'abst.':>6s} {'p50 ms':>8s} {'tok/s':>6s}")
    for mode, by_generator in results.items():
        for generator, r in by_generator.items():
            cite = "-" if r["citation_precision"] is None else f"{r['citation_precision']:.3f}"
            tps = "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:.1f}"
            say(f"  {mode:8s} {generator:10s} {r['f1']:6.3f} {r['rouge_l']:8.3f} {cite:>7s} {r['abstained']:6.3f} {r['p50_ms']:8.1f} {tps:>6s}")
