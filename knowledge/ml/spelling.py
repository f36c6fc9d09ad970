"""Correcting a question's misspelt words against the words of the documents it is searched in.

BM25 matches no misspelt word, so before searching an expert's collection each unknown word (not in
its documents nor ``dictionary``, at least ``MIN_LENGTH`` letters, no digit) becomes the document word
at the smallest Damerau-Levenshtein distance, at most 1 edit up to 5 letters and 2 beyond, ties to the
more frequent word; with none that close it stays. rapidfuzz does the search.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from rapidfuzz import process
from rapidfuzz.distance import DamerauLevenshtein

MIN_LENGTH = 4
CANDIDATES = 8  # closest words considered before the frequency tie-break
MAX_LOOKUPS = 32  # distinct unknown words searched per question
# A question is in a language its documents do not share (and is refused: ``serving.route``) when UNKNOWN_WORDS_MIN or
# more of its words, and over 1 - KNOWN_WORDS_MIN of them, are neither the documents' nor a misspelling of one
# (``Vocabulary.known_words``); one unknown word may be a name or a greeting ("yes sir", "hg"). Chosen with
# tools/choose_known_words.py: among questions with two unknown words or more, English ones hold at least 0.8 known
# (demo/queries.jsonl over the demo's documents, doc2dial's validation turns over its own), translations of demo
# questions into seven other languages at most 0.5; the cut is midway. Documents of fewer than VOCABULARY_MIN distinct
# words lack common words of their own language and say nothing: collections of 10 demo or doc2dial documents (1,100 to
# 1,500 words) turned away 2 to 17 of the demo's 403 English questions, of 40 (2,550 to 2,800 words) 0 to 2 (the tool).
KNOWN_WORDS_MIN = 0.65
UNKNOWN_WORDS_MIN = 2
VOCABULARY_MIN = 3000
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
# A document's or question's words: runs of letters of any alphabet; in the scripts written without spaces (Chinese,
# Japanese; Korean alike) each character counts as a word.
_CJK = "\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af"
_LETTERS = re.compile(f"[{_CJK}]|[^\\W\\d_{_CJK}]+")


def max_edits(word: str) -> int:
    """1 edit for words of up to 5 letters, 2 for longer ones (a 4-letter word 2 edits away is another word)."""
    return 1 if len(word) <= 5 else 2


@dataclass
class Correction:
    """The question as corrected, and each change (as written, replaced by)."""

    text: str
    changes: list[tuple[str, str]] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changes)


class Vocabulary:
    """The words of a set of documents with their counts, ready for nearest-word search."""

    def __init__(self, counts: Counter[str]):
        self.counts = counts
        # Most frequent first, so that among equally close words the common one comes back first.
        self.words = [w for w, _ in counts.most_common() if len(w) >= MIN_LENGTH - 1]

    @classmethod
    def from_texts(cls, texts: Iterable[str]) -> Vocabulary:
        counts: Counter[str] = Counter()
        for text in texts:
            counts.update(_LETTERS.findall(text.lower()))
        return cls(counts)

    def __len__(self) -> int:
        return len(self.counts)

    def closest(self, word: str) -> str | None:
        """The document word nearest to ``word`` within ``max_edits`` (ties: the more frequent), or None."""
        limit = max_edits(word)
        found = process.extract(word, self.words, scorer=DamerauLevenshtein.distance, score_cutoff=limit, limit=CANDIDATES)
        if not found:
            return None
        return min(found, key=lambda item: (item[1], -self.counts[item[0]], item[0]))[0]

    def known_words(self, question: str) -> tuple[int, int]:
        """(words the documents hold, words) of ``question`` (``_LETTERS``), a word held as written or within ``closest``'s
        reach (a misspelling of one of theirs): few for a question in a language the documents do not share.

        Past ``MAX_LOOKUPS`` distinct unknown words the rest count as unknown (a pasted wall of text costs no more).
        """
        words = _LETTERS.findall(question.lower())
        unknown = [w for w in dict.fromkeys(words) if w not in self.counts]
        near = {w for w in unknown[:MAX_LOOKUPS] if len(w) >= MIN_LENGTH and self.closest(w) is not None}
        return sum(w in self.counts or w in near for w in words), len(words)

    def shares_language(self, question: str) -> bool:
        """Whether ``question`` is in the documents' language (``KNOWN_WORDS_MIN``, ``UNKNOWN_WORDS_MIN``); always so when
        the documents hold fewer than ``VOCABULARY_MIN`` words."""
        if len(self.counts) < VOCABULARY_MIN:
            return True
        known, total = self.known_words(question)
        return total - known < UNKNOWN_WORDS_MIN or known >= KNOWN_WORDS_MIN * total

    def correct(self, question: str, dictionary: frozenset[str] | set[str] = frozenset()) -> Correction:
        """``question`` with each unknown word replaced by its closest document word (see the module)."""
        changes: list[tuple[str, str]] = []
        pieces: list[str] = []
        last = 0
        looked_up: dict[str, str | None] = {}
        for match in _WORD.finditer(question):
            word = match.group()
            lower = word.lower()
            if len(lower) < MIN_LENGTH or "'" in lower or lower in self.counts or lower in dictionary:
                continue
            if lower not in looked_up:
                # A pasted wall of text must not cost a search per word: past MAX_LOOKUPS distinct unknown words the rest stay as written.
                looked_up[lower] = self.closest(lower) if len(looked_up) < MAX_LOOKUPS else None
            better = looked_up[lower]
            if better is None or better == lower:
                continue
            pieces += [question[last : match.start()], better]
            last = match.end()
            changes.append((word, better))
        if not changes:
            return Correction(question)
        pieces.append(question[last:])
        return Correction("".join(pieces), changes)
