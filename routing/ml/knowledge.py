"""Knowledge-aware routing: what each expert's own documents say about a question, next to the router.

For the router's ``CANDIDATES`` most probable experts, ``FEATURES`` are the router's log-probability,
the best dense cosine in the expert's collection and its best BM25 score over the best candidate's.
A conditional logit over them is fitted on the router's validation split and kept only if its 5-fold
cross-validated accuracy beats the router's; the other experts keep the router's probabilities. The
in-scope score adds the best cosine and the question's jargon (``knowledge.ml.distinct``), each scaled
by ``routing.ml.inscope``'s held-out-expert rule. docs/EVALUATIONS.md has the figures.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .diagnostics import softmax
from .inscope import IN_SCOPE_RULE, held_out_auroc

FEATURES = ("router_log_prob", "dense_top", "keyword_share")
CANDIDATES = 3
L2 = 1e-3  # per validation question; keeps the weights finite when the evidence separates val perfectly
FOLDS = 5
FILE = "knowledge.json"
ROUTER_ALONE = (1.0, 0.0, 0.0)
SCALES = (0.0, 0.25, 0.5, 1.0)  # the cosine's weight in the in-scope score, times the spreads' ratio on validation
FIT_CANDIDATES = CANDIDATES + 1  # evidence looked up on validation: the candidates a question would have were its expert gone
# A likely misroute for the review queue: another candidate's documents match the question this much better (best
# cosine) than the answering expert's; the smallest gap that flags at most 5% of doc2dial's validation questions.
MISROUTE_GAP = 0.1


class MissingKnowledge(ValueError):
    """Some experts have no searchable documents: the combiner cannot learn what their evidence looks like."""

    def __init__(self, experts: list[str]):
        self.experts = experts
        super().__init__(f"knowledge-aware routing needs documents for every expert; none are indexed for: {', '.join(experts)}")


def candidate_rows(probs: np.ndarray, k: int = CANDIDATES) -> np.ndarray:
    """(n, min(k, N)) indices of each row's most probable experts, best first (ties: the lower index)."""
    k = min(k, probs.shape[1])
    return np.argsort(-probs, axis=1, kind="stable")[:, :k]


def features(probs: np.ndarray, dense: np.ndarray, keywords: np.ndarray, candidates: np.ndarray) -> np.ndarray:
    """(n, k, 3) features of each row's candidates (see the module); ``dense`` and ``keywords`` are (n, N)."""
    rows = np.arange(len(probs))[:, None]
    log_p = np.log(np.clip(probs[rows, candidates], 1e-12, None))
    d = np.nan_to_num(dense[rows, candidates], nan=0.0)
    s = np.nan_to_num(keywords[rows, candidates], nan=0.0)
    best_s = s.max(axis=1, keepdims=True)
    share = np.divide(s, best_s, out=np.zeros_like(s), where=best_s > 0)
    return np.stack([log_p, d, share], axis=2)


Lookup = Callable[[list[int], np.ndarray, str], list[tuple[float, float] | None]]


def evidence_matrix(lookup: Lookup, probs: np.ndarray, vectors: np.ndarray, texts: list[str], k: int = CANDIDATES) -> tuple[np.ndarray, np.ndarray]:
    """(dense, keywords), each (n, N), for every question's ``k`` most probable experts; NaN where not searched or empty.

    ``lookup(expert indices, vector, text)`` returns each expert's (best cosine, best BM25 score), or
    None for an expert whose collection is missing or empty.
    """
    dense = np.full(probs.shape, np.nan)
    keywords = np.full(probs.shape, np.nan)
    for i in range(len(probs)):
        cand, found_dense, found_keywords = evidence_one(lookup, probs[i], vectors[i], texts[i], k)
        dense[i, cand], keywords[i, cand] = found_dense, found_keywords
    return dense, keywords


def candidates_one(probs: np.ndarray, k: int = CANDIDATES) -> list[int]:
    """``candidate_rows`` of one question's probabilities (N,)."""
    return np.argsort(-probs, kind="stable")[: min(k, len(probs))].tolist()


def evidence_one(lookup: Lookup, probs: np.ndarray, vector: np.ndarray, text: str, k: int = CANDIDATES) -> tuple[list[int], np.ndarray, np.ndarray]:
    """One question's candidates (``candidates_one``) and their (dense, keywords) evidence, each (k,), NaN where not found.

    ``evidence_matrix`` for serving's single question, without two (1, N) matrices to fill and read back.
    """
    cand = candidates_one(probs, k)
    found = lookup(cand, vector, text)
    dense = np.array([f[0] if f is not None else np.nan for f in found], dtype=np.float64)
    keywords = np.array([f[1] if f is not None else np.nan for f in found], dtype=np.float64)
    return cand, dense, keywords


def _fit_weights(f: np.ndarray, gold: np.ndarray, l2: float) -> np.ndarray:
    """Conditional-logit weights for features ``f`` (n, k, F) and the gold candidate's position ``gold`` (n,)."""
    from scipy.optimize import minimize

    n = len(f)
    start = np.asarray(ROUTER_ALONE, dtype=np.float64)

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        p = softmax(f @ w)
        chosen = p[np.arange(n), gold]
        nll = -np.log(np.clip(chosen, 1e-12, None)).sum()
        grad = -(f[np.arange(n), gold] - (p[:, :, None] * f).sum(axis=1)).sum(axis=0)
        # The penalty pulls towards the router alone, not towards zero (which would ignore the router).
        return float(nll + l2 * n * ((w - start) ** 2).sum()), grad + 2 * l2 * n * (w - start)

    result = minimize(loss, start, jac=True, method="L-BFGS-B")
    return np.asarray(result.x, dtype=np.float64)


@dataclass
class KnowledgeCombiner:
    """The fitted weights, the in-scope score's scale, and what validation said about them."""

    weights: np.ndarray = field(default_factory=lambda: np.asarray(ROUTER_ALONE))
    score_scale: float = 0.0
    candidates: int = CANDIDATES
    report: dict = field(default_factory=dict)
    word_scale: float = 0.0  # the weight of ``DistinctWords``' evidence in the in-scope score

    def __post_init__(self) -> None:
        # Whether the evidence changes the ranking (False: validation kept the router alone); read per question, decided once.
        self.active = not np.allclose(self.weights, ROUTER_ALONE)

    @property
    def in_scope(self) -> bool:
        """Whether the evidence moves the in-scope score (what abstention reads), whatever the ranking does."""
        return self.score_scale > 0 or self.word_scale > 0

    @property
    def serves(self) -> bool:
        """Whether serving should look the evidence up at all: it ranks, or it takes part in abstention."""
        return self.active or self.in_scope

    def combine(self, probs: np.ndarray, score: np.ndarray, dense: np.ndarray, keywords: np.ndarray,
                words: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(probabilities (n, N), in-scope scores (n,)) with the evidence of each row's candidates (``words``: ``DistinctWords.scores``)."""
        cand = candidate_rows(probs, self.candidates)
        rows = np.arange(len(probs))[:, None]
        out = probs.astype(np.float64, copy=True)
        mass = probs[rows, cand].sum(axis=1, keepdims=True)
        out[rows, cand] = softmax(features(probs, dense, keywords, cand) @ self.weights) * mass
        best_dense = np.nan_to_num(dense[rows, cand], nan=0.0).max(axis=1)
        in_scope = np.asarray(score, dtype=np.float64) + self.score_scale * best_dense
        return out, in_scope + self.word_scale * np.asarray(words, dtype=np.float64) if words is not None and self.word_scale else in_scope

    def combine_one(self, probs: np.ndarray, score: float, cand: list[int], dense: np.ndarray, keywords: np.ndarray,
                    words: float = 0.0) -> tuple[np.ndarray, float]:
        """``combine`` for one question: probabilities (N,), its score, and ``evidence_one``'s candidates and evidence.

        The same figures as ``combine`` on one row (``cand`` must be ``candidates_one(probs,
        self.candidates)``), in a handful of array operations: serving's path.
        """
        chosen = probs[cand]
        d = np.nan_to_num(dense, nan=0.0)
        s = np.nan_to_num(keywords, nan=0.0)
        best_s = float(s.max())
        share = s / best_s if best_s > 0 else np.zeros_like(s)
        z = self.weights[0] * np.log(np.clip(chosen, 1e-12, None)) + self.weights[1] * d + self.weights[2] * share
        e = np.exp(z - z.max())
        out = probs.astype(np.float64, copy=True)
        out[cand] = e / e.sum() * chosen.sum()
        return out, float(score) + self.score_scale * float(d.max()) + self.word_scale * float(words)

    @classmethod
    def fit(cls, probs: np.ndarray, score: np.ndarray, dense: np.ndarray, keywords: np.ndarray, y: np.ndarray,
            experts: list[str] | None = None, l2: float = L2, seed: int = 0, candidates: int = CANDIDATES,
            held_out_score: np.ndarray | None = None, words: np.ndarray | None = None,
            held_out_words: np.ndarray | None = None) -> KnowledgeCombiner:
        """Fit on validation rows: router probabilities and scores, each expert's evidence (NaN: not searched), gold ``y``.

        ``held_out_score``: the router's in-scope score of each row as if its gold expert did not
        exist (``TextRouter.held_out_scores``); the cosine's weight is chosen on it (see the module),
        with the evidence of one candidate more than served where the caller looked it up
        (``evidence_matrix(..., k=FIT_CANDIDATES)``). Without it the cosine gets the full spreads' ratio.

        Raises:
            MissingKnowledge: an expert's collection gave no evidence for any row (no documents).
        """
        n, n_experts = probs.shape
        if dense.shape != probs.shape or keywords.shape != probs.shape or len(y) != n:
            raise ValueError("probabilities, evidence and labels must cover the same questions and experts")
        names = experts or [str(i) for i in range(n_experts)]
        cand = candidate_rows(probs, candidates)
        at_candidates = dense[np.arange(n)[:, None], cand]
        # An expert that is someone's candidate yet never gave evidence has nothing indexed.
        missing = np.setdiff1d(np.unique(cand), np.unique(cand[~np.isnan(at_candidates)]))
        if missing.size:
            raise MissingKnowledge([names[i] for i in missing])
        f = features(probs, dense, keywords, cand)
        hit = (cand == y[:, None])
        usable = hit.any(axis=1)  # rows whose gold expert is a candidate: the only ones evidence can fix
        gold = hit.argmax(axis=1)
        router_acc = float((cand[:, 0] == y).mean())
        cv_acc = _cross_validated_accuracy(f[usable], gold[usable], l2, seed, n_total=n)
        weights = _fit_weights(f[usable], gold[usable], l2) if usable.sum() >= 2 * FOLDS else np.asarray(ROUTER_ALONE)
        kept = cv_acc is not None and cv_acc > router_acc
        best_dense = np.nan_to_num(at_candidates, nan=0.0).max(axis=1)
        spread = float(best_dense.std())
        ratio = float(np.std(score)) / spread if spread > 1e-9 else 0.0
        scale, scale_report, word_scale = ratio, {}, 0.0
        if held_out_score is not None:
            if len(held_out_score) != n:
                raise ValueError("the held-out scores must cover the same questions")
            # The evidence a question has where its expert does not exist: the best among the candidates
            # the router would then offer (its most probable experts but the gold one; the caller looks
            # up one more candidate than serving does, else a question would be compared over fewer
            # collections held out than served and any evidence, noise too, would seem to tell them apart).
            rows = np.arange(n)[:, None]
            wide = candidate_rows(probs, candidates + 1)
            held = np.stack([r[r != g][:candidates] if (r == g).any() else r[:candidates] for r, g in zip(wide, y, strict=True)]) if n else wide
            others = np.nan_to_num(dense[rows, held], nan=0.0).max(axis=1)
            served, without = np.asarray(score, dtype=np.float64), np.asarray(held_out_score, dtype=np.float64)
            tried = [{"factor": f, "auroc": held_out_auroc(served + f * ratio * best_dense, without + f * ratio * others, y)} for f in SCALES]
            best = max(tried, key=lambda t: t["auroc"])  # ties: the smaller weight
            scale, scale_report = best["factor"] * ratio, {"score_scale_rule": IN_SCOPE_RULE, "score_scale_tried": tried}
            if words is not None and held_out_words is not None:
                # Then the distinct words (``DistinctWords``), on top of the chosen cosine weight.
                w_spread = float(np.std(words))
                w_ratio = float(np.std(score)) / w_spread if w_spread > 1e-9 else 0.0
                w_tried = [{"factor": f, "auroc": held_out_auroc(served + scale * best_dense + f * w_ratio * np.asarray(words),
                                                                 without + scale * others + f * w_ratio * np.asarray(held_out_words), y)}
                           for f in SCALES]
                word_scale = max(w_tried, key=lambda t: t["auroc"])["factor"] * w_ratio
                scale_report["word_scale_tried"] = w_tried
        report = {
            "features": list(FEATURES), "fitted_weights": [round(float(w), 4) for w in weights],
            "val_questions": int(n), "gold_among_candidates": round(float(usable.mean()), 4) if n else None,
            "val_accuracy_router": round(router_acc, 4), "val_accuracy_cv": None if cv_acc is None else round(cv_acc, 4),
            "kept": bool(kept), "rule": f"kept when its {FOLDS}-fold cross-validated accuracy on validation beats the router's",
            **scale_report,
        }
        return cls(weights if kept else np.asarray(ROUTER_ALONE), scale, candidates, report, word_scale)

    # -- persistence -------------------------------------------------------------------------
    def save(self, folder: str | Path) -> None:
        path = Path(folder) / FILE
        tmp = path.with_suffix(".partial")
        tmp.write_text(json.dumps({"weights": [float(w) for w in self.weights], "score_scale": self.score_scale, "word_scale": self.word_scale,
                                   "candidates": self.candidates, "features": list(FEATURES), "report": self.report}))
        tmp.replace(path)

    @classmethod
    def load(cls, folder: str | Path) -> KnowledgeCombiner | None:
        """The combiner saved in ``folder``, or None where there is none."""
        path = Path(folder) / FILE
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        if list(data.get("features", [])) != list(FEATURES):
            return None  # saved by a version with other features: route without it rather than misread it
        return cls(np.asarray(data["weights"], dtype=np.float64), float(data["score_scale"]), int(data["candidates"]), dict(data.get("report") or {}),
                   float(data.get("word_scale") or 0.0))


def _cross_validated_accuracy(f: np.ndarray, gold: np.ndarray, l2: float, seed: int, n_total: int) -> float | None:
    """Accuracy over all ``n_total`` validation rows of weights fitted on the other folds (rows whose gold is no candidate count as misses)."""
    n = len(f)
    if n < 2 * FOLDS:
        return None
    order = np.random.default_rng(seed).permutation(n)
    correct = 0
    for k in range(FOLDS):
        held = order[k::FOLDS]
        train = np.setdiff1d(order, held)
        w = _fit_weights(f[train], gold[train], l2)
        correct += int(((f[held] @ w).argmax(axis=1) == gold[held]).sum())
    return correct / n_total


def documents_disagree(evidence: dict[str, dict[str, float | None]], answered: str) -> str | None:
    """The candidate whose documents match the question ``MISROUTE_GAP`` better than the answering expert's, if any.

    ``evidence`` is a trace's knowledge view (slug -> {"best_match": the best cosine in its collection, ...}).
    """
    mine = (evidence.get(answered) or {}).get("best_match")
    if mine is None:
        return None
    others = [(e["best_match"], slug) for slug, e in evidence.items()
              if slug != answered and isinstance(e, dict) and e.get("best_match") is not None]
    best, slug = max(others, default=(None, None))
    return slug if best is not None and best - mine >= MISROUTE_GAP else None
