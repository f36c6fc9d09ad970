"""A model's answer made safe to show: citation markers mapped to real passages, stops, and a support check.

Markers are renumbered in order of first citation and those of passages that do not exist dropped,
the same way streamed (``CitationStream``) and whole (``parse_answer``). An answer that cites nothing
cites the passages it draws on; one with figures or subjects no passage has is unsupported, and a
whole one is replaced by ``NOT_FOUND``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from .extractive import NOT_FOUND, Answer, Passage

DEFAULT_CITATION_FORMAT = "[{index}]"
# Shown after a streamed answer that turned out unsupported (the words already sent cannot be taken back).
UNSUPPORTED_NOTE = f"(Not supported by the documents. {NOT_FOUND})"

# How models say they found nothing (ours is told to write NOT_FOUND; small ones paraphrase it).
_NOT_FOUND_PHRASES = re.compile(
    r"could not find|couldn't find|can't find|cannot find|not (?:in|found in|mentioned in|covered (?:in|by)) the "
    r"(?:knowledge base|reference material|documents?|passages?)|(?:reference material|documents?|passages?) (?:does|do) not "
    r"(?:contain|mention|say|answer)|\bi (?:do not|don't) know\b|no information (?:about|on)",
    re.IGNORECASE,
)
# A line that only announces an answer ("The answer to this question is:"); small models sometimes write nothing else.
_LEAD_IN = re.compile(r"^\W*(?:the\s+)?(?:correct\s+|short\s+)?answer(?:\s+to\s+(?:this|the|your)\s+question)?\s+is\W*$", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]+")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_STOP = frozenset(
    "a an the of to in on for and or is are be been can could i my me do does did how what when where who why which with it its "
    "this that these those you your yours we our they them their he she his her there here from by at as if so not no yes but "
    "will would should shall may might must have has had was were am any all some more most other such than then also just "
    "only very into out about over under after before up down one two get got make made need needs answer question".split()
)
_STEM = 5  # words are compared by their first letters: "renewal" and "renewing" are the same word here


def content_stems(text: str) -> set[str]:
    """The words of ``text`` that carry meaning, cut to their first letters ("renewal" and "renewing" are one)."""
    return {w[:_STEM] for w in _WORD.findall(text.lower()) if len(w) >= 3 and w not in _STOP and not w.isdigit()}


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "").rstrip("0").rstrip(".") if "." in n else n.replace(",", "") for n in _NUMBER.findall(text)}


def said_not_found(text: str) -> bool:
    """Whether an answer says the material does not contain the answer (in our words or a model's paraphrase)."""
    return NOT_FOUND.lower().rstrip(".") in text.lower() or bool(_NOT_FOUND_PHRASES.search(text))


def paragraph_ends_answer(before: str) -> bool:
    """Whether a blank line after ``before`` ends the answer: once a sentence was written, not after a lead-in
    such as "The answer is:" (a small model often puts its answer in the next paragraph)."""
    text = before.strip()
    return bool(re.search(r"[.!?](?:[\"')\]]*)(?:\s|$)", text)) or len(text.split()) >= 12


def marker_pattern(citation_format: str = DEFAULT_CITATION_FORMAT) -> re.Pattern[str]:
    """What a marker of ``citation_format`` looks like in text (group 1: the number)."""
    before, _, after = citation_format.partition("{index}")
    return re.compile(re.escape(before) + r"\s*(\d{1,3})\s*" + re.escape(after))


@dataclass(frozen=True)
class Support:
    """How far an answer is backed by its passages: the passages it shares words with, and what none of them has."""

    passages: list[int]  # 0-based, best first: those sharing at least two words with the answer
    foreign_numbers: list[str]  # figures in the answer that no passage (nor the question) contains
    foreign_terms: list[str]  # question words no passage contains, which the answer uses anyway

    @property
    def unsupported(self) -> bool:
        return bool(self.foreign_numbers) or len(self.foreign_terms) >= 2


def support(text: str, passages: Sequence[Passage], question: str = "") -> Support:
    """Check ``text`` (markers removed) against ``passages``; see ``Support``."""
    known = set().union(*(content_stems(f"{p.title} {p.text}") for p in passages)) if passages else set()
    known_numbers = set().union(*(_numbers(f"{p.title} {p.text}") for p in passages)) if passages else set()
    words = content_stems(text)
    foreign_numbers = sorted(_numbers(text) - known_numbers - _numbers(question))
    foreign_terms = sorted((words & content_stems(question)) - known)
    scored = []
    for i, p in enumerate(passages):
        shared = len(words & content_stems(f"{p.title} {p.text}"))
        if shared >= 2:
            scored.append((shared, -i))
    ranked = [-i for _, i in sorted(scored, reverse=True)]
    return Support(passages=ranked, foreign_numbers=foreign_numbers, foreign_terms=foreign_terms)


class CitationStream:
    """Shows a model's answer delta by delta with its markers renumbered; ``finish`` gives the ``Answer``.

    Args:
        passages: the passages in prompt order (the model's ``[n]`` is ``passages[n - 1]``).
        citation_format: the expert's marker, with ``{index}``.
        stops: texts that end the answer where they appear (not shown), e.g. an imitated
            reference-block delimiter.
        stop_at_paragraph: end the answer at its first blank line (small models ramble after it).

    ``feed`` returns what can be shown now: everything except a tail that may still grow into a
    marker or a stop (``[``, ``[1``, a single newline...), which waits for the next delta.
    """

    def __init__(self, passages: Sequence[Passage], citation_format: str = DEFAULT_CITATION_FORMAT, *,
                 stops: Iterable[str] = (), stop_at_paragraph: bool = False):
        self.passages = list(passages)
        self.format = citation_format
        self.order: list[int] = []  # 1-based prompt numbers, in order of first citation
        self.shown = ""
        self.stopped = False
        self._buffer = ""
        self._pattern = marker_pattern(citation_format)
        self._stops = [s for s in stops if s] + (["\n\n"] if stop_at_paragraph else [])
        before, _, after = citation_format.partition("{index}")
        partial = [re.escape(before[:k]) for k in range(1, len(before) + 1)]
        partial += [re.escape(before) + r"\s*\d{0,3}\s*" + re.escape(after[:k]) for k in range(len(after))]
        partial += [re.escape(s[:k]) for s in self._stops for k in range(1, len(s))]
        self._partial = re.compile("(?:" + "|".join(partial) + ")") if partial else None
        self._longest = max([len(before) + len(after) + 8, *(len(s) for s in self._stops)])

    def _renumber(self, match: re.Match[str]) -> str:
        n = int(match.group(1))
        if not 1 <= n <= len(self.passages):
            return ""
        if n not in self.order:
            self.order.append(n)
        return self.format.format(index=self.order.index(n) + 1)

    def _show(self, text: str) -> str:
        text = self._pattern.sub(self._renumber, text)
        if not self.shown:
            text = text.lstrip()
        self.shown += text
        return text

    def _cut_at_stop(self) -> None:
        for stop in self._stops:
            at = self._buffer.find(stop)
            # A blank line before the first sentence is not the end of the answer.
            while at != -1 and stop == "\n\n" and not paragraph_ends_answer(self.shown + self._buffer[:at]):
                at = self._buffer.find(stop, at + 1)
            if at != -1:
                self._buffer = self._buffer[:at]
                self.stopped = True

    def feed(self, delta: str) -> str:
        """The part of the answer that can be shown after ``delta`` arrived ("" once stopped)."""
        if self.stopped:
            return ""
        self._buffer += delta
        self._cut_at_stop()
        if self.stopped:
            return self.flush()
        cut = len(self._buffer)
        if self._partial is not None:
            for i in range(max(0, len(self._buffer) - self._longest), len(self._buffer)):
                if self._partial.fullmatch(self._buffer, i):
                    cut = i
                    break
        ready, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return self._show(ready)

    def flush(self) -> str:
        """Whatever was held back (the answer has ended)."""
        ready, self._buffer = self._buffer, ""
        return self._show(ready.rstrip() if self.stopped else ready)

    def finish(self, question: str = "", *, min_score: float = 0.25, streamed: bool = True) -> tuple[str, Answer]:
        """The text still to show and the final ``Answer`` (call after the last ``feed``).

        An answer without markers gets the passages it shares words with cited at its end. The
        answer is ungrounded when the model said it found nothing, when it cites nothing and the
        passages were weak, or when it is unsupported (see ``support``); an unsupported whole
        answer (``streamed=False``) becomes ``NOT_FOUND``, a streamed one gets ``UNSUPPORTED_NOTE``.
        """
        tail = self.flush()
        body = self.shown.strip()
        if not body:
            return (NOT_FOUND if streamed else ""), Answer(text=NOT_FOUND, citations=[], grounded=False)
        plain = self._pattern.sub(" ", body)
        if not [line for line in plain.splitlines() if line.strip() and not _LEAD_IN.match(line)]:  # announced, never said
            if not streamed:
                return "", Answer(text=NOT_FOUND, citations=[], grounded=False)
            return tail + "\n\n" + NOT_FOUND, Answer(text=f"{body}\n\n{NOT_FOUND}", citations=[], grounded=False)
        not_found = said_not_found(plain) and not self.order
        checked = support(plain, self.passages, question)
        if not self.order and not not_found and not checked.unsupported and checked.passages:
            self.order.extend(i + 1 for i in checked.passages[:2])
            marks = " ".join(self.format.format(index=k) for k in range(1, len(self.order) + 1))
            tail += ("" if self.shown[-1:].isspace() else " ") + marks
            body = f"{body} {marks}"
        citations = [self.passages[n - 1] for n in self.order]
        weak = not self.passages or max(p.score for p in self.passages) < min_score
        grounded = (bool(citations) or not weak) and not not_found and not checked.unsupported
        if checked.unsupported and not not_found:
            if not streamed:
                return "", Answer(text=NOT_FOUND, citations=[], grounded=False)
            tail += "\n\n" + UNSUPPORTED_NOTE
            body = f"{body}\n\n{UNSUPPORTED_NOTE}"
        if not_found and not citations and len(body) < 2 * len(NOT_FOUND) and not streamed:
            body = NOT_FOUND  # a paraphrase of "not found" reads best in the platform's own words
        return tail, Answer(text=body, citations=citations, grounded=grounded)


def parse_answer(
    text: str,
    passages: Sequence[Passage],
    *,
    citation_format: str = DEFAULT_CITATION_FORMAT,
    min_score: float = 0.25,
    question: str = "",
    stops: Iterable[str] = (),
    stop_at_paragraph: bool = False,
) -> Answer:
    """Turn a model's whole output into an ``Answer`` whose markers point at its citations (see ``CitationStream``)."""
    stream = CitationStream(passages, citation_format, stops=stops, stop_at_paragraph=stop_at_paragraph)
    stream.feed(text)
    _, answer = stream.finish(question, min_score=min_score, streamed=False)
    answer.text = re.sub(r"[ \t]{2,}", " ", answer.text).strip()
    return answer
