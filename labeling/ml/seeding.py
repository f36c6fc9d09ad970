"""Discovery seeded by documents: each question goes to the department whose documents answer it best.

A team often has each department's documents before it has a labelled log. Then every question carries
a signal no clustering of the questions alone has: how well each department's documents match it
(``evidence``: the best dense cosine of the question against each department's passages). Giving each
question to its best-matching department beat k-means on the questions, plain or blended with the
evidence, on doc2dial, so the rule has no knob (docs/EVALUATIONS.md, "Discovery with documents").

A conversation is decided as one: its questions' evidence averaged (``conversation_evidence``), since a
follow-up ("and how long does that take?") that says little to a clustering of questions still matches
its department's documents.
"""

from __future__ import annotations

import numpy as np

NO_EVIDENCE = -1


def by_documents(evidence: np.ndarray) -> np.ndarray:
    """The department (column) of each question (row): the one whose documents match it best.

    ``evidence`` is (questions, departments), NaN where a department has nothing to say (no passage, or
    a collection of another embedding model). A row without any evidence gets ``NO_EVIDENCE``.
    """
    evidence = np.asarray(evidence, dtype=np.float64)
    if evidence.ndim != 2 or evidence.shape[1] == 0:
        raise ValueError("evidence must be (questions, departments) with at least one department")
    known = ~np.isnan(evidence)
    best = np.where(known, evidence, -np.inf).argmax(axis=1)
    return np.where(known.any(axis=1), best, NO_EVIDENCE)


def conversation_evidence(evidence: np.ndarray, opener: list[int] | np.ndarray, openers: list[int]) -> np.ndarray:
    """Each conversation's evidence, in the order of ``openers``: the mean over its questions of theirs (NaN ignored).

    ``opener[i]`` is the row of question ``i``'s conversation's first question; ``openers`` those rows.
    """
    evidence = np.asarray(evidence, dtype=np.float64)
    place = {row: k for k, row in enumerate(openers)}
    conversation = np.array([place[int(row)] for row in opener], dtype=int)
    known = ~np.isnan(evidence)
    sums = np.zeros((len(openers), evidence.shape[1]))
    counts = np.zeros_like(sums)
    np.add.at(sums, conversation, np.where(known, evidence, 0.0))
    np.add.at(counts, conversation, known)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / counts, np.nan)
