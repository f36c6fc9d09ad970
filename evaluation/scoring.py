"""What a person gets from an answer, scored from the chat path's own result: the figures every replayed evaluation reports.

SQuAD token F1 and ROUGE-L against a reference, ``recall`` (the reference's content words held),
``words``, ``junk_rate`` (``experts.ml.answer_metrics.is_junk``), ``two_answers``, ``clarified`` (with
``clarify_precision``/``clarify_recall``), ``abstained``, ``citation_precision`` and the latency.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from experts.ml.answer_metrics import content_recall, holds_fact, is_abstention, is_junk, paired_difference, rouge_l, token_f1, word_count
from serving.route import NO_EXPERT_ANSWER


@dataclass
class Scored:
    """One answer as a person got it, with what the chat path did to get it."""

    query_id: str
    question: str
    answer: str
    expert: str
    gold_expert: str = ""
    reference: str | None = None  # the gold answer, where the dataset has one
    facts: list[str] = field(default_factory=list)  # key facts a full answer holds (``--questions``)
    kind: str = ""  # the question file's kind; "out_of_scope" is fully answered by saying nothing covers it
    cited_documents: list[str] = field(default_factory=list)  # external ids of the cited passages' documents
    documents: list[str] = field(default_factory=list)  # external ids of every retrieved passage's document, best first
    relevant: set[str] = field(default_factory=set)
    total_ms: float = 0.0
    retrieve_ms: float = 0.0
    answer_source: str = ""
    clarified: bool = False  # the product asked which expert the question meant first (``workspace.ask`` replied)
    experts_answering: int = 1  # how many experts' parts make up the answer
    best_sentence_score: float | None = None  # the sentence scorer's score of the quoted sentence (extractive answers)
    best_passage_score: float | None = None  # the best retrieved passage's score

    @property
    def abstained(self) -> bool:
        return is_abstention(self.answer) or self.answer.strip() == NO_EXPERT_ANSWER

    @property
    def fully_answered(self) -> bool:
        """Every key fact held; for an out-of-scope question, an honest "nothing covers this"."""
        if self.kind == "out_of_scope":
            return self.abstained
        return all(holds_fact(self.text, f) for f in self.facts)

    @property
    def text(self) -> str:
        """The answer as scored: empty when it abstained (SQuAD 2.0's convention)."""
        return "" if self.abstained else self.answer

    def as_row(self) -> dict[str, Any]:
        row = {"query_id": self.query_id, "question": self.question, "answer": self.answer, "expert": self.expert,
               "gold_expert": self.gold_expert, "answer_source": self.answer_source, "cited_documents": self.cited_documents,
               "best_sentence_score": self.best_sentence_score, "best_passage_score": self.best_passage_score}
        if self.reference is not None:
            row.update(reference=self.reference, f1=round(token_f1(self.text, self.reference), 4))
        if self.facts:
            row.update(facts=self.facts, facts_held=[holds_fact(self.text, f) for f in self.facts], fully_answered=self.fully_answered, kind=self.kind)
        return row


def scored(result: Any, question: dict[str, Any], external_ids: dict[int, str], gold_expert: str = "",
           relevant: set[str] | None = None) -> Scored:
    """A ``serving.chat.ChatResult`` for ``question`` as ``Scored`` (``external_ids``: document pk → the dataset's doc_id)."""
    def docs(passages: list[dict[str, Any]]) -> list[str]:
        return [external_ids.get(p.get("document_id"), "") for p in passages]

    return Scored(
        query_id=str(question.get("query_id", "")), question=question["text"], answer=result.answer, expert=result.expert, gold_expert=gold_expert,
        reference=question.get("answer"), facts=list(question.get("facts") or []), kind=question.get("kind") or "",
        cited_documents=docs(result.citations),
        documents=docs(result.passages), relevant=relevant or set(), total_ms=result.timings.get("total_ms", 0.0),
        retrieve_ms=result.timings.get("retrieve_ms", 0.0), answer_source=result.answer_source,
        clarified=bool(result.choice), experts_answering=len(result.experts_answering),
        best_sentence_score=((result.selection or {}).get("quoted") or [{}])[0].get("score"),
        best_passage_score=max((p.get("score") or 0.0 for p in result.passages), default=None),
    )


def _mean(values: list[float]) -> float | None:
    return round(float(np.mean(values)), 4) if values else None


def summarise(rows: list[Scored]) -> dict[str, Any]:
    """The figures of one arm (see the module docstring); None where the rows carry nothing to score it by."""
    answered = [r for r in rows if not r.abstained]
    referenced = [r for r in rows if r.reference]
    recalls = [c for r in referenced if (c := content_recall(r.text, r.reference or "")) is not None]
    precisions = [sum(d in r.relevant for d in r.cited_documents) / len(r.cited_documents) for r in rows if r.cited_documents and r.relevant]
    with_facts = [r for r in rows if r.facts]
    out: dict[str, Any] = {
        "n": len(rows),
        "f1": _mean([token_f1(r.text, r.reference or "") for r in referenced]),
        "rouge_l": _mean([rouge_l(r.text, r.reference or "") for r in referenced]),
        "recall": _mean(recalls),
        "words": round(float(statistics.median([word_count(r.text) for r in answered])), 1) if answered else None,
        "mean_words": _mean([word_count(r.text) for r in answered]),
        "two_answers": _mean([float(r.experts_answering > 1) for r in rows]),  # answers made of two experts' parts
        "clarified": _mean([float(r.clarified) for r in rows]),  # questions asked back first
        "junk_rate": _mean([float(is_junk(r.text)) for r in answered]),
        "abstained": _mean([float(r.abstained) for r in rows]),
        "citation_precision": _mean(precisions),
        "expert_is_gold": _mean([float(r.expert == r.gold_expert) for r in rows if r.gold_expert]),
        "p50_ms": round(statistics.median([r.total_ms for r in rows]), 1) if rows else None,
        "retrieve_p50_ms": round(statistics.median([r.retrieve_ms for r in rows]), 1) if rows else None,
    }
    if with_facts:
        answerable = [r for r in with_facts if r.kind != "out_of_scope"]
        out["fully_answered"] = _mean([float(r.fully_answered) for r in with_facts])
        out["facts_held"] = _mean([float(np.mean([holds_fact(r.text, f) for f in r.facts])) for r in answerable])
        kinds = sorted({r.kind for r in with_facts if r.kind})
        if kinds:
            out["fully_answered_by_kind"] = {k: _mean([float(r.fully_answered) for r in with_facts if r.kind == k]) for k in kinds}
            out["two_answers_by_kind"] = {k: _mean([float(r.experts_answering > 1) for r in with_facts if r.kind == k]) for k in kinds}
            # Asked back on the "ambiguous" kind (recall), and of the questions asked back, the share that were (precision; None: none asked).
            out["clarify_precision"] = _mean([float(r.kind == "ambiguous") for r in with_facts if r.clarified])
            out["clarify_recall"] = _mean([float(r.clarified) for r in with_facts if r.kind == "ambiguous"])
    return out


def paired(a: list[Scored], b: list[Scored], metric: str = "f1") -> dict[str, Any] | None:
    """``a`` minus ``b`` on the same questions: the mean per-question difference of ``metric`` (f1 or recall) and its standard error."""
    def value(r: Scored) -> float | None:
        if not r.reference:
            return None
        return token_f1(r.text, r.reference) if metric == "f1" else content_recall(r.text, r.reference)

    pairs = [(value(x), value(y)) for x, y in zip(a, b, strict=True)]
    pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
    if not pairs:
        return None
    mean, se = paired_difference([x for x, _ in pairs], [y for _, y in pairs])
    return {"mean": round(mean, 4), "se": None if se is None else round(se, 4), "n": len(pairs)}
