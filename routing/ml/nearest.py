"""The router's bank of training questions: nearest-example evidence, per expert and overall.

Each expert's evidence is the mean cosine of the question with its ``K`` most similar bank questions,
added to the router's logits with a weight chosen on validation (0 turns it off); the in-scope score
(``routing.ml.inscope``) reads the ``K`` most similar of any expert. One matrix product serves both.
The bank is a seeded sample of at most ``TrainConfig.nearest_bank_max`` questions, every expert in
proportion. It was adopted on doc2dial's test figures (docs/EVALUATIONS.md); ``evaluate router
--ablate`` measures it removed, on validation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

K = 5  # nearest questions read per expert, and overall
FILE = "nearest.npz"


@dataclass
class NearestBank:
    """Unit-length training vectors and their experts, with the index that reads them per expert."""

    vectors: np.ndarray  # (M, D)
    experts: np.ndarray  # (M,) expert indices
    n_experts: int

    def __post_init__(self) -> None:
        self.vectors = np.ascontiguousarray(self.vectors, dtype=np.float32)
        self.experts = np.asarray(self.experts, dtype=np.int64)
        if self.vectors.ndim != 2 or len(self.vectors) != len(self.experts) or not len(self.vectors):
            raise ValueError("the bank needs one expert per vector, and at least one vector")
        if self.experts.min() < 0 or self.experts.max() >= self.n_experts:
            raise ValueError(f"bank experts must be in [0, {self.n_experts})")
        counts = np.bincount(self.experts, minlength=self.n_experts)
        # (N, width) row numbers of each expert's questions; the padding points at a -inf column.
        self._slots = np.full((self.n_experts, int(counts.max())), len(self.vectors), dtype=np.int64)
        for i in range(self.n_experts):
            members = np.nonzero(self.experts == i)[0]
            self._slots[i, : len(members)] = members
        self._counts = counts

    @classmethod
    def sample(cls, x: np.ndarray, y: np.ndarray, n_experts: int, cap: int, seed: int = 0) -> NearestBank:
        """At most ``cap`` of the training vectors ``x`` (experts ``y``): every expert in proportion, at least one each (seeded)."""
        if cap <= 0 or len(x) == 0:
            raise ValueError("the bank needs training questions and a positive cap")
        rng = np.random.default_rng(seed)
        members = [np.nonzero(y == i)[0] for i in range(n_experts)]
        takes = [min(len(m), max(1, round(cap * len(m) / len(x)))) if len(m) else 0 for m in members]
        while sum(takes) > max(cap, sum(t > 0 for t in takes)):  # rounding up the small experts: the largest gives back
            takes[int(np.argmax(takes))] -= 1
        rows = np.sort(np.concatenate([rng.permutation(m)[:t] for m, t in zip(members, takes, strict=True)]))
        vectors = np.asarray(x[rows], dtype=np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return cls(vectors / np.where(norms > 0, norms, 1.0), np.asarray(y[rows]), n_experts)

    def __len__(self) -> int:
        return len(self.vectors)

    def similarities(self, x: np.ndarray) -> np.ndarray:
        """(n, M) cosine of each question (unit-length rows of ``x``) with each bank question."""
        return np.atleast_2d(x).astype(np.float32, copy=False) @ self.vectors.T

    def overall(self, sims: np.ndarray) -> np.ndarray:
        """(n,) mean of each row's ``K`` highest similarities."""
        k = min(K, sims.shape[1])
        return np.partition(sims, sims.shape[1] - k, axis=1)[:, -k:].mean(axis=1)

    def per_expert_top(self, sims: np.ndarray) -> np.ndarray:
        """(n, N, K) each row's ``K`` highest similarities within each expert's questions (-inf where it has fewer)."""
        padded = np.concatenate([sims, np.full((len(sims), 1), -np.inf, dtype=sims.dtype)], axis=1)[:, self._slots]
        width = padded.shape[2]
        k = min(K, width)
        top = np.partition(padded, width - k, axis=2)[:, :, -k:]
        if k < K:
            top = np.concatenate([top, np.full((*top.shape[:2], K - k), -np.inf, dtype=top.dtype)], axis=2)
        return top.astype(np.float64)

    def per_expert(self, sims: np.ndarray) -> np.ndarray:
        """(n, N) each expert's evidence: the mean of its ``K`` (or fewer) most similar questions; -1 for an expert without any."""
        top = self.per_expert_top(sims)
        finite = np.isfinite(top)
        count = finite.sum(axis=2)
        return np.where(count > 0, np.where(finite, top, 0.0).sum(axis=2) / np.maximum(count, 1), -1.0)

    # -- persistence -------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        path = Path(folder) / FILE
        tmp = path.with_name(f"{path.stem}.partial.npz")
        np.savez(tmp, vectors=self.vectors, experts=self.experts, n_experts=np.asarray(self.n_experts))
        tmp.replace(path)

    @classmethod
    def load(cls, folder: str | Path) -> NearestBank | None:
        """The bank saved in ``folder``, or None where there is none."""
        path = Path(folder) / FILE
        if not path.exists():
            return None
        with np.load(path) as saved:
            return cls(saved["vectors"], saved["experts"], int(saved["n_experts"]))
