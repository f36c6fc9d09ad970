"""Grounded training examples: an expert's labelled questions answered from its own knowledge base.

Each question is searched in the expert's collection; the target is its gold answer (``Query.answer``)
cited to the passage holding it (``experts.ml.targets``), or else the extractive answer with citations.
Questions whose passages are too weak, or miss the gold answer, are skipped, never taught as "not
found"; a question the log holds out (validation or test split) is a held-out example.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from django.conf import settings

from encoders import get_encoder
from experts.choices import ExampleSource, ExampleSplit
from experts.generation.extractive import scorer_spec
from experts.ml.extractive import Passage, extractive_answer
from experts.ml.targets import gold_target
from experts.models import Expert
from experts.services import TrainingDataError, add_example, current_prompt, prompt_passages
from jobs.services import JobFailed, JobReporter
from knowledge.search import search_expert
from knowledge.stores.base import StoreUnavailable

from .choices import ProposalStatus
from .models import Assignment, ReviewDecision


@dataclass
class GroundingReport:
    """What a grounding pass did with the expert's labelled questions."""

    questions: int = 0
    created: int = 0
    duplicates: int = 0
    weak: int = 0
    gold: int = 0  # examples whose target is the question's gold answer
    unsupported: int = 0  # gold answers none of the shown passages holds
    held_out_again: int = 0  # grounded examples made for training before the source's split was read, now held out


# The imported log's own split (``Query.split``) decides where a grounded example goes: a question the
# source holds out (its validation or test split, which the router's gate also holds out) never trains
# an adapter; it is one of the held-out questions the activation gate answers. Questions without a
# source split are held out by ``experts.services.held_out_split`` (experts.services.EVAL_FRACTION).
_HELD_OUT_SOURCE_SPLITS = frozenset({"val", "validation", "dev", "test"})


def example_split(source_split: str) -> str:
    """The training-example split of a question from the source's ``source_split`` ("" lets the hash decide)."""
    split = (source_split or "").strip().lower()
    if split in _HELD_OUT_SOURCE_SPLITS:
        return ExampleSplit.EVAL
    return ExampleSplit.TRAIN if split == "train" else ""


def labelled_pairs(expert: Expert, limit: int = 200) -> list[tuple[str, str, str]]:
    """(question, gold answer or "", the source's split or "") of the expert's labelled questions
    (promoted proposals, then review decisions), deduplicated, oldest first.

    A question asked twice keeps the first gold answer found for it, and is held out if any of its
    copies is held out by the source.
    """
    rows = list(
        Assignment.objects.filter(proposal__expert=expert, proposal__status=ProposalStatus.PROMOTED)
        .order_by("query_id").values_list("query__text", "query__answer", "query__split")
    )
    rows += list(ReviewDecision.objects.filter(expert=expert, query__isnull=False).order_by("id")
                 .values_list("query__text", "query__answer", "query__split"))
    unique: dict[str, list[str]] = {}
    for text, answer, split in rows:
        key = " ".join(text.lower().split())
        if not key:
            continue
        if key not in unique:
            unique[key] = [text.strip(), "", ""]
        if not unique[key][1] and (answer or "").strip():
            unique[key][1] = answer.strip()
        mine = example_split(split)
        if mine == ExampleSplit.EVAL or not unique[key][2]:  # held out by any copy: held out
            unique[key][2] = mine
    return [(text, answer, split) for text, answer, split in list(unique.values())[:limit]]


def _passages(hits: list[Any]) -> list[Passage]:
    return [Passage(text=h.payload.get("text", ""), title=h.payload.get("title", ""), url=h.payload.get("url", ""), score=h.dense_score,
                    expert=h.payload.get("expert", ""), document_id=h.payload.get("document_id"), chunk_id=h.id) for h in hits]


def _stored(p: Passage) -> dict[str, Any]:
    row = asdict(p)
    return {k: row[k] for k in ("title", "text", "url", "score", "document_id")}


def build_grounded_examples(expert: Expert, limit: int = 200, reporter: JobReporter | None = None) -> dict[str, int]:
    """Answer up to ``limit`` labelled questions from the expert's documents and store them as examples.

    The stored passages are the cited ones first, in citation order, so the answer's ``[n]``
    markers point at the prompt's passage ``n``, followed by the retrieved passages it did not cite.
    Rerunning adds nothing twice (examples are unique by question and answer).
    """
    reporter = reporter or JobReporter()
    report = GroundingReport()
    questions = labelled_pairs(expert, limit)
    if not questions:
        raise JobFailed(f"{expert.name} has no labelled questions yet: promote a proposal or review questions first")
    encoder = get_encoder()
    shown = prompt_passages()
    _, citation_format = current_prompt(expert)
    for i, (question, gold, split) in enumerate(questions, start=1):
        report.questions += 1
        try:
            passages = _passages(search_expert(expert, question, limit=settings.RETRIEVAL_TOP_K))
        except StoreUnavailable as exc:
            raise JobFailed(f"the knowledge base of {expert.name} is unavailable: {exc}") from None
        if gold:
            # Kept in retrieval order: the marker numbers the passage as serving's prompt will.
            weak = not passages or max(p.score for p in passages) < settings.EXTRACTIVE_MIN_SCORE
            target = None if weak else gold_target(gold, shown(question, passages), citation_format=citation_format)
            if target is None:
                report.weak += weak
                report.unsupported += not weak
                continue
            text, ordered = target, passages
            report.gold += 1
        else:
            answer = extractive_answer(question, passages, encoder.encode, min_score=settings.EXTRACTIVE_MIN_SCORE,
                                       max_sentences=settings.EXTRACTIVE_MAX_SENTENCES, scorer=scorer_spec(settings))
            if not answer.grounded:
                report.weak += 1
                continue
            cited_ids = {id(p) for p in answer.citations}
            text, ordered = answer.text, list(answer.citations) + [p for p in passages if id(p) not in cited_ids]
        try:
            example, created = add_example(expert, question, text, split=split, passages=[_stored(p) for p in ordered], source=ExampleSource.GROUNDED)
        except TrainingDataError:
            report.weak += 1
            continue
        report.created += created
        report.duplicates += not created
        if not created and split == ExampleSplit.EVAL and example.split != ExampleSplit.EVAL and example.source == ExampleSource.GROUNDED:
            # Made by an earlier pass that ignored the source's split: a question the source holds out stops training.
            example.split = ExampleSplit.EVAL
            example.save(update_fields=["split"])
            report.held_out_again += 1
        reporter.progress(i / len(questions), f"{i}/{len(questions)} questions, {report.created} new examples")
    reporter.log(f"{report.created} grounded examples added ({report.gold} with a gold answer), {report.duplicates} already there, "
                 f"{report.weak} too weakly grounded to use, {report.unsupported} whose gold answer the passages do not hold"
                 + (f", {report.held_out_again} moved to the held-out questions (the source holds them out)" if report.held_out_again else ""))
    return asdict(report)
