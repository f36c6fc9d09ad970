"""The router's character view of a question, and the letter typos it is trained against.

A sentence encoder loses a misspelt word ("licnse"); its character n-grams barely change. ``CharView``
is TF-IDF over the character n-grams within words and a multinomial logistic regression over it; the
router blends its log-probabilities with the network's and adds its confidence to the in-scope score.
Both views learn every question twice, as written and with seeded typos (``typo_copies``).
``CharView.log_proba_one`` scores one question in plain numpy (``test_charview`` checks it against
scikit-learn's path).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# The view's settings, chosen on the validation splits of clinc150 and hwu64 (domains, 10% typos):
# char_wb 2-4-grams, C=10. Never on test figures.
NGRAM_RANGE = (2, 4)
MIN_DF = 2
MAX_FEATURES = 100_000
C = 10.0


def add_typos(text: str, rate: float, rng: np.random.Generator) -> str:
    """Each letter gets a typo with probability ``rate``: deleted, doubled, swapped with the next or replaced."""
    out: list[str] = []
    chars = list(text)
    i = 0
    while i < len(chars):
        c = chars[i]
        if c.isalpha() and rng.random() < rate:
            kind = rng.integers(4)
            if kind == 0:
                pass  # deleted
            elif kind == 1:
                out += [c, c]
            elif kind == 2 and i + 1 < len(chars):
                out += [chars[i + 1], c]
                i += 1
            else:
                out.append(LETTERS[rng.integers(26)])
        else:
            out.append(c)
        i += 1
    return "".join(out)


def typo_copies(texts: list[str], rate: float, seed: int) -> list[str]:
    """One copy of each text with letter typos at ``rate`` (seeded: the same texts give the same copies)."""
    rng = np.random.default_rng(seed)
    return [add_typos(t, rate, rng) for t in texts]


class CharView:
    """TF-IDF over character n-grams within words, and a logistic regression over it (see the module)."""

    def __init__(self, vocabulary: dict[str, int], idf: np.ndarray, coef: np.ndarray, intercept: np.ndarray, ngram_range: tuple[int, int] = NGRAM_RANGE):
        from sklearn.feature_extraction.text import TfidfVectorizer

        # C order throughout: safetensors writes an array's buffer as if it were (scikit-learn's coef_ may not be)
        self.vocabulary, self.idf = vocabulary, np.ascontiguousarray(idf, dtype=np.float64)
        self.coef, self.intercept = np.ascontiguousarray(coef, dtype=np.float32), np.ascontiguousarray(intercept, dtype=np.float64)
        self.ngram_range = (int(ngram_range[0]), int(ngram_range[1]))
        self.vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=self.ngram_range, sublinear_tf=True, vocabulary=vocabulary)
        self.vectorizer.idf_ = self.idf
        self.analyze = self.vectorizer.build_analyzer()
        self.coef_t = np.ascontiguousarray(self.coef.T)  # (features, classes): one row per n-gram, gathered per question

    @property
    def n_classes(self) -> int:
        return int(self.coef.shape[0])

    @classmethod
    def fit(cls, texts: list[str], y: np.ndarray, n_classes: int, seed: int = 0) -> CharView:
        """Fit on ``texts`` labelled ``y`` (class indices 0..n_classes-1, each present)."""
        from sklearn.feature_extraction.text import TfidfVectorizer
        from sklearn.linear_model import LogisticRegression

        y = np.asarray(y, dtype=np.int64)
        if sorted(set(y.tolist())) != list(range(n_classes)):
            raise ValueError(f"the character view needs examples of all {n_classes} classes")
        vectorizer = TfidfVectorizer(analyzer="char_wb", ngram_range=NGRAM_RANGE, sublinear_tf=True, min_df=MIN_DF, max_features=MAX_FEATURES, dtype=np.float32)
        features = vectorizer.fit_transform(texts)
        model = LogisticRegression(C=C, max_iter=300, random_state=seed).fit(features, y)
        coef, intercept = model.coef_, model.intercept_
        if n_classes == 2:  # binary: scikit-learn keeps one row; the softmax of (-z/2, z/2) is the sigmoid of z
            coef, intercept = np.vstack([-coef / 2, coef / 2]), np.array([-intercept[0] / 2, intercept[0] / 2])
        vocabulary = {str(k): int(v) for k, v in vectorizer.vocabulary_.items()}
        return cls(vocabulary, vectorizer.idf_, coef, intercept)

    def log_proba(self, texts: list[str]) -> np.ndarray:
        """Log-probabilities (n, classes) for many texts (scikit-learn's sparse path)."""
        logits = np.asarray(self.vectorizer.transform(texts) @ self.coef.T, dtype=np.float64) + self.intercept
        return _log_softmax(logits)

    def log_proba_one(self, text: str) -> np.ndarray:
        """The same for one text, in plain numpy: serving's path (as few array operations as it takes)."""
        get = self.vocabulary.get
        cols, counts = [], []
        for gram, count in Counter(self.analyze(text)).items():
            col = get(gram)
            if col is not None:
                cols.append(col)
                counts.append(count)
        logits = self.intercept.copy()
        if cols:
            v = (1.0 + np.log(np.asarray(counts, dtype=np.float64))) * self.idf[cols]
            v /= math.sqrt(v @ v)
            logits += v @ self.coef_t[cols]
        logits -= logits.max()
        logits -= math.log(np.exp(logits).sum())
        return logits

    def save(self, path: str | Path) -> None:
        from safetensors.numpy import save_file

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        (path / "vocabulary.json").write_text(json.dumps({"ngram_range": list(self.ngram_range), "vocabulary": self.vocabulary}))
        save_file({"idf": self.idf, "coef": self.coef, "intercept": self.intercept}, str(path / "weights.safetensors"))

    @classmethod
    def load(cls, path: str | Path) -> CharView:
        from safetensors.numpy import load_file

        path = Path(path)
        meta: dict[str, Any] = json.loads((path / "vocabulary.json").read_text())
        weights = load_file(str(path / "weights.safetensors"))
        return cls(meta["vocabulary"], weights["idf"], weights["coef"], weights["intercept"], tuple(meta["ngram_range"]))  # type: ignore[arg-type]


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
