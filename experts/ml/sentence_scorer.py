"""Which retrieved sentence answers the question: a linear scorer over a few generic features, and how it is fitted.

The extractive answer (``experts.ml.extractive``) quotes the best-scoring sentences of the top
passages. A sentence's score is ``features @ weights`` over:

* ``cosine``: its embedding's cosine with the question's;
* ``overlap``: the share of the question's content words it contains;
* ``passage_rank``: its passage's rank among those retrieved (0 = the best);
* ``first_in_passage``: it opens its passage (often the section's own summary);
* ``heading``: it does not end like a sentence (no ``. ! ? : ; )``): a title or a link text;
* ``question``: it is itself a question (FAQ pages ask before they answer);
* ``log_words``: the log of its length in words, counted up to ``WORDS_CAP`` (a run-on "sentence"
  of a hundred words, a list the page never punctuated, earns no more than a full sentence);
* ``previous_cosine``: the cosine of the sentence before it, in the same passage, with the question
  (0 for a passage's first): in "Can I renew online? Yes, you can renew..." the answer follows the
  sentence that matches;
* ``after_question``: the sentence before it is a question.

``HAND_SET`` is the scorer the extractive answer used before (cosine, 0.15 x overlap and a 0.02
preference per better passage rank). ``DEFAULT_WEIGHTS`` were fitted by ``fit_weights`` on the
train split of doc2dial (its 2,379 questions with gold answers; the sentences of the top three
passages the product's routed search returns), with the targets and pull chosen on its
validation split. ``manage.py evaluate sentences`` reproduces the fit and scores every scorer:
the sentence these weights pick has token F1 0.295 against the gold answer on validation and 0.282
on test (hand-set: 0.252 and 0.246; the best sentence within reach: 0.464 and 0.460). The features
say nothing about any domain, so the weights carry over; a dataset of a different kind can be
refitted the same way (``EXTRACTIVE_SENTENCE_WEIGHTS``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

FEATURES = ("cosine", "overlap", "passage_rank", "first_in_passage", "heading", "question", "log_words", "previous_cosine", "after_question")
HAND_SET = {"cosine": 1.0, "overlap": 0.15, "passage_rank": -0.02}
# Fitted on doc2dial's train split; soft targets and no pull chosen on its validation split (see the module).
DEFAULT_WEIGHTS = {
    "cosine": 1.82, "overlap": 0.795, "passage_rank": -0.158, "first_in_passage": 0.439, "heading": 0.007,
    "question": -0.501, "log_words": 0.522, "previous_cosine": 1.074, "after_question": 0.166,
}
_ENDS_SENTENCE = (".", "!", "?", ":", ";", ")")
# Chosen on doc2dial's validation split (the refit's picked F1 there by cap, with routed search
# weighing collections by the plain probabilities: none 0.288, 60 0.291, 40 0.290, 30 0.292,
# 25 0.293, 20 0.287, 15 0.288).
WORDS_CAP = 25
_DEFAULT_VECTOR = np.array([float(DEFAULT_WEIGHTS.get(name, 0.0)) for name in FEATURES])


def weight_vector(weights: dict[str, float] | None = None) -> np.ndarray:
    """``weights`` (default: ``DEFAULT_WEIGHTS``) in ``FEATURES`` order; a feature not named weighs 0."""
    if weights is None:
        return _DEFAULT_VECTOR
    unknown = set(weights) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown sentence features {sorted(unknown)}; known: {', '.join(FEATURES)}")
    return np.array([float(weights.get(name, 0.0)) for name in FEATURES])


def sentence_features(question_tokens: set[str], sentences: Sequence[str], tokens: Sequence[set[str]], cosines: np.ndarray,
                      passage_rank: int) -> np.ndarray:
    """The features (rows: one passage's sentences in order; columns: ``FEATURES``)."""
    n = len(sentences)
    out = np.zeros((n, len(FEATURES)))
    if not n:
        return out
    stripped = [s.strip() for s in sentences]
    cosines = np.asarray(cosines, dtype=np.float64)
    out[:, 0] = cosines
    out[:, 1] = [len(question_tokens & t) / max(1, len(question_tokens)) for t in tokens]
    out[:, 2] = passage_rank
    out[0, 3] = 1.0
    out[:, 4] = [not s.endswith(_ENDS_SENTENCE) for s in stripped]
    out[:, 5] = [s.endswith("?") for s in stripped]
    out[:, 6] = [math.log1p(min(len(s.split()), WORDS_CAP)) for s in stripped]
    out[1:, 7] = cosines[:-1]
    out[1:, 8] = out[:-1, 5]
    return out


# What a feature says when it made the quoted sentence stand out, in the domain team's words: the first
# phrase when the sentence has more of it than the other candidates, the second when it has less.
_REASONS = {
    "cosine": ("closest in meaning to the question", ""),
    "overlap": ("uses the question's own words", ""),
    "passage_rank": ("", "from one of the best-matching passages"),
    "first_in_passage": ("opens its section", ""),
    "heading": ("", "a full sentence, not a heading"),
    "question": ("", "answers rather than asks"),
    "log_words": ("says more than the shorter sentences", "short and to the point"),
    "previous_cosine": ("follows a sentence close to the question", ""),
    "after_question": ("follows a question", ""),
}


def reasons(features: np.ndarray, chosen: int, w: np.ndarray, limit: int = 3) -> list[str]:
    """Why candidate ``chosen`` scored above the others under weights ``w`` (``weight_vector``): the
    features that lifted it most against their mean over every candidate (weight x difference), as
    plain phrases, strongest first."""
    x = np.asarray(features, dtype=np.float64)
    if len(x) < 2:
        return []
    mean = x.mean(axis=0)
    lift = (x[chosen] - mean) * w
    out = []
    for j in np.argsort(-lift):
        if lift[j] <= 1e-6 or len(out) >= limit:
            break
        more, less = _REASONS[FEATURES[j]]
        phrase = more if x[chosen, j] > mean[j] else less
        if phrase:
            out.append(phrase)
    return out


def fit_weights(groups: Sequence[tuple[np.ndarray, np.ndarray]], prior: dict[str, float] | None = None, pull: float = 0.0,
                min_best: float = 0.05) -> dict[str, float]:
    """Weights that pick, among each question's candidate sentences, the ones that answer it.

    ``groups``: per question, its candidates' features (``sentence_features`` rows) and each one's
    token F1 against the gold answer. A conditional logit over each question's candidates, with soft
    targets proportional to F1 squared (two sentences that both hold the answer both count), fitted
    by L-BFGS with an L2 pull of strength ``pull`` towards ``prior`` (default ``HAND_SET``).
    Questions none of whose candidates reaches ``min_best`` F1 teach nothing and are left out.
    """
    from scipy.optimize import minimize

    w0 = weight_vector(prior if prior is not None else HAND_SET)
    kept = [(np.asarray(x, dtype=np.float64), np.asarray(f, dtype=np.float64)) for x, f in groups if len(f) and float(np.max(f)) >= min_best]
    if not kept:
        raise ValueError("no question has a candidate sentence holding its gold answer: nothing to fit the sentence scorer on")
    targets = [f**2 / float((f**2).sum()) for _, f in kept]

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        total, grad = 0.0, np.zeros_like(w)
        for (x, _), t in zip(kept, targets, strict=True):
            s = x @ w
            s = s - s.max()
            log_p = s - math.log(float(np.exp(s).sum()))
            total -= float(t @ log_p)
            grad -= x.T @ (t - np.exp(log_p))
        n = len(kept)
        return total / n + pull * float(((w - w0) ** 2).sum()), grad / n + 2 * pull * (w - w0)

    fitted = minimize(loss, w0, jac=True, method="L-BFGS-B").x
    return {name: round(float(v), 3) for name, v in zip(FEATURES, fitted, strict=True)}


def picked_f1(groups: Sequence[tuple[np.ndarray, np.ndarray]], weights: dict[str, float]) -> float | None:
    """The mean F1 of the sentence ``weights`` rank first, over the questions with candidates."""
    w = weight_vector(weights)
    scores = [float(np.asarray(f)[int(np.argmax(np.asarray(x) @ w))]) for x, f in groups if len(f)]
    return float(np.mean(scores)) if scores else None
