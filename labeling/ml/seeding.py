"""Discovery seeded by documents: each question goes to the department whose documents answer it best.

A team often has each department's documents before it has a labelled log. Then every question carries
a signal no clustering of the questions alone has: how well each department's documents match it
(``evidence``: the best dense cosine of the question against each department's passages). On doc2dial,
with the four agencies' documents, giving each first turn to its best-matching department scores ARI
0.726 on val, 0.859 on train and 0.813 on test against the agencies, where k-means on the questions told
K = 4 scores 0.388 / 0.627 / 0.505 (docs/EVALUATIONS.md, "Discovery with documents"). Blending the
evidence into k-means (the questions' neighbour means beside w times the centred evidence, w 0.5 to 4)
lost to the plain rule on val (0.705 at best), so the rule has no knob.
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
