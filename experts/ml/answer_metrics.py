"""How close an answer is to a gold answer: SQuAD-normalised token F1 and ROUGE-L. Pure: no Django.

Both compare words after SQuAD's normalisation (lower case, punctuation and the articles a/an/the
removed, whitespace collapsed). Citation markers (``[1]``) are taken out first: they are scored as
citations, not as words of the answer. An abstention ("not found") is scored as the empty answer,
SQuAD 2.0's convention: it earns 1.0 against an empty gold answer and 0.0 against any other.
"""

from __future__ import annotations

import math
import re
import statistics
import string
from collections import Counter
from collections.abc import Sequence

from .extractive import NOT_FOUND
from .junk import looks_like_junk

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_PARTS_WORDS = re.compile("[-'\u2019]")


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces; but a hyphen or an apostrophe parts
    words, so that "non-driver" and "non - driver", or "don't" and "don t" (the same words, as doc2dial's extraction spaces
    them or drops the apostrophe), read the same."""
    text = _PARTS_WORDS.sub(" ", text.lower()).translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def strip_citations(text: str, citation_format: str = "[{index}]") -> str:
    """The answer without its citation markers (e.g. ``[1]``, ``[ 2 ]``)."""
    before, _, after = citation_format.partition("{index}")
    return re.sub(re.escape(before) + r"\s*\d{1,3}\s*" + re.escape(after), " ", text)


def is_abstention(text: str) -> bool:
    """Whether the answer says the documents do not hold it (the platform's fixed sentence) or says nothing."""
    return not text.strip() or NOT_FOUND.lower().rstrip(".") in text.lower()


def answer_tokens(text: str, citation_format: str = "[{index}]") -> list[str]:
    """The normalised words an answer is scored on (none for an abstention)."""
    if is_abstention(text):
        return []
    return normalize_answer(strip_citations(text, citation_format)).split()


def token_f1(prediction: str, gold: str, citation_format: str = "[{index}]") -> float:
    """SQuAD token F1 of ``prediction`` against ``gold`` (both empty: 1.0; one empty: 0.0)."""
    pred, ref = answer_tokens(prediction, citation_format), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    common = sum((Counter(pred) & Counter(ref)).values())
    if not common:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def paired_difference(a: Sequence[float], b: Sequence[float]) -> tuple[float, float | None]:
    """The mean of ``a[i] - b[i]`` over the same questions and its standard error (None for one question):
    the spread of the per-question differences over the square root of their number, which says whether a
    gap between two mean scores is more than the luck of which questions were drawn."""
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} and {len(b)} scores cannot be paired")
    diff = [x - y for x, y in zip(a, b, strict=True)]
    return statistics.fmean(diff), (statistics.stdev(diff) / math.sqrt(len(diff)) if len(diff) > 1 else None)


def _lcs(a: list[str], b: list[str]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(prediction: str, gold: str, citation_format: str = "[{index}]") -> float:
    """ROUGE-L F1 (longest common subsequence of the normalised words; both empty: 1.0)."""
    pred, ref = answer_tokens(prediction, citation_format), normalize_answer(gold).split()
    if not pred or not ref:
        return float(pred == ref)
    lcs = _lcs(pred, ref)
    if not lcs:
        return 0.0
    precision, recall = lcs / len(pred), lcs / len(ref)
    return 2 * precision * recall / (precision + recall)


def support(answer: str, passage: str) -> float:
    """Share of the answer's normalised words that occur in ``passage`` (1.0 for an empty answer)."""
    words = normalize_answer(answer).split()
    if not words:
        return 1.0
    have = Counter(normalize_answer(passage).split())
    return sum((Counter(words) & have).values()) / len(words)


# Words that carry no fact of their own: a reference answer's other words are what an answer must hold
# (``content_recall``). scikit-learn's English stop list, the one discovery's keywords leave out.
def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def content_words(text: str) -> list[str]:
    """The normalised words of ``text`` that are not stop words, in order (repeats kept)."""
    stop = _stop_words()
    return [w for w in normalize_answer(strip_citations(text)).split() if w not in stop]


def content_recall(prediction: str, gold: str) -> float | None:
    """Share of the reference answer's content words the answer holds (None when the reference has none).

    What token F1 hides: a one-sentence answer scores F1 well against a short reference and still leaves
    out what the question needed; recall says how much of the reference a person got.
    """
    ref = Counter(content_words(gold))
    if not ref:
        return None
    pred = Counter(w for w in answer_tokens(prediction) if w not in _stop_words())
    return sum((ref & pred).values()) / sum(ref.values())


def word_count(text: str) -> int:
    """The answer's length in words, citation markers left out (0 for an abstention)."""
    return 0 if is_abstention(text) else sum(any(c.isalnum() for c in w) for w in strip_citations(text).split())


def holds_fact(answer: str, fact: str) -> bool:
    """Whether the answer holds a key fact: every content word of ``fact`` is among the answer's words."""
    needed = set(content_words(fact)) or set(normalize_answer(fact).split())
    return bool(needed) and needed <= set(normalize_answer(strip_citations(answer)).split())


def is_junk(text: str) -> bool:
    """Whether an answer is not prose a person can read (``junk.looks_like_junk``); an abstention is not junk: it is scored as one."""
    return not is_abstention(text) and looks_like_junk(strip_citations(text))
