"""The in-scope score: how much a question looks like what the experts were trained on (the router abstains below it).

``score = (1 - mix) * network + mix * nearest + char_scale * confidence``: the similarity to the
nearest prototype, the mean cosine of the nearest training questions (``routing.ml.nearest``) and the
character view's confidence. ``fit_in_scope`` chooses (mix, scale) on the router's own validation
questions: each expert in turn plays the out-of-scope one (its prototypes and bank rows left out),
and the highest mean AUROC wins (``IN_SCOPE_RULE``), "none of the extra evidence" among the choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .nearest import K, NearestBank

NEAREST_MIXES = (0.0, 0.5, 1.0)
CHAR_SCALES = (0.0, 0.25, 0.5, 1.0)  # times the network score's spread over the confidence's, on validation
IN_SCOPE_RULE = "highest mean AUROC on validation questions, each expert in turn held out as out-of-scope"


@dataclass
class InScope:
    """A fitted in-scope score: the mix of network and nearest-question evidence, and the confidence's weight."""

    mix: float = 0.0
    char_scale: float = 0.0
    report: dict[str, Any] = field(default_factory=dict)

    def describe(self, network: str) -> str:
        """What the score reads, e.g. ``prototype_similarity+nearest_questions`` (``network``: the network's score's name)."""
        parts = ([network] if self.mix < 1.0 else []) + (["nearest_questions"] if self.mix else []) + (["char_confidence"] if self.char_scale else [])
        return "+".join(parts)

    def combine(self, network: np.ndarray, nearest: np.ndarray | None, confidence: np.ndarray | None) -> np.ndarray:
        """In-scope scores (n,) from the network's, the nearest questions' (``NearestBank.overall``) and the confidence (None: absent)."""
        score = np.asarray(network, dtype=np.float64)
        if self.mix and nearest is not None:
            score = (1.0 - self.mix) * score + self.mix * nearest
        if confidence is not None and self.char_scale:
            score = score + self.char_scale * confidence
        return score

    def combine_one(self, network: float, nearest: float | None, confidence: float | None) -> float:
        score = network
        if self.mix and nearest is not None:
            score = (1.0 - self.mix) * score + self.mix * nearest
        if confidence is not None and self.char_scale:
            score += self.char_scale * confidence
        return score

    def held_out(self, network: np.ndarray, kind: str, bank: NearestBank | None, x: np.ndarray, y: np.ndarray,
                 char_probs: np.ndarray | None) -> np.ndarray:
        """(n,) each question's score as if its own expert ``y[i]`` did not exist (see ``fit_in_scope`` for the arguments).

        What a caller that adds evidence of its own to this score (``routing.ml.knowledge``) fits
        the evidence's weight on, as ``fit_in_scope`` did.
        """
        if self.mix and bank is None:
            raise ValueError("this in-scope score reads nearest questions: it needs the router's bank")
        per_expert = bank.per_expert_top(bank.similarities(x)) if self.mix and bank is not None else None
        return self.combine(*_parts(network, kind, per_expert, char_probs, np.asarray(y)))


def fit_in_scope(
    network: np.ndarray, network_kind: str, x: np.ndarray, y: np.ndarray, bank: NearestBank,
    char_probs: np.ndarray | None, char_spread_ratio: float,
) -> InScope:
    """Choose the mix and the confidence's weight on the validation questions as written (``IN_SCOPE_RULE``).

    Args:
        network: (n, N) the network's per-expert evidence for each validation question: prototype
            similarities (``network_kind="prototypes"``: the score is their max) or calibrated
            probabilities (``"probabilities"``: the score is the highest).
        x, y: the validation questions' embeddings and experts.
        bank: the training questions the nearest-question evidence reads.
        char_probs: (n, N) the character view's probabilities, or None without one.
        char_spread_ratio: the network score's spread over the confidence's, on validation; each of
            ``CHAR_SCALES`` is a multiple of it.
    """
    n, n_experts = network.shape
    if len(x) != n or len(y) != n or (char_probs is not None and char_probs.shape != network.shape):
        raise ValueError("every validation question needs its network evidence, embedding, expert and character view probabilities")
    held = [i for i in range(n_experts) if (y == i).any() and (y != i).any()]
    if not held:
        return InScope(0.0, float(char_spread_ratio), {"rule": IN_SCOPE_RULE, "skipped": "validation holds fewer than two experts"})
    per_expert = bank.per_expert_top(bank.similarities(x))
    served = _parts(network, network_kind, per_expert, char_probs, None)
    without = _parts(network, network_kind, per_expert, char_probs, y)
    scales = CHAR_SCALES if char_probs is not None else (0.0,)
    candidates = []
    for mix in NEAREST_MIXES:
        for factor in scales:
            candidate = InScope(mix, factor * char_spread_ratio)
            candidates.append({"mix": mix, "char_scale_factor": factor, "char_scale": candidate.char_scale,
                               "auroc": held_out_auroc(candidate.combine(*served), candidate.combine(*without), y)})
    best = max(candidates, key=lambda c: c["auroc"])  # ties: the first (less nearest-question evidence, less confidence)
    report = {"rule": IN_SCOPE_RULE, "held_out_experts": len(held), "bank": len(bank), "k": K, "candidates": candidates}
    return InScope(float(best["mix"]), float(best["char_scale"]), report)


def held_out_auroc(served: np.ndarray, without: np.ndarray, y: np.ndarray) -> float:
    """Mean over experts of the AUROC of the others' questions (``served`` scores) against the expert's
    own questions scored as if it did not exist (``without``): ``IN_SCOPE_RULE``'s figure."""
    from sklearn.metrics import roc_auc_score

    held = [i for i in np.unique(y) if (y != i).any()]
    aurocs = [roc_auc_score(np.r_[np.ones((y != i).sum()), np.zeros((y == i).sum())], np.r_[served[y != i], without[y == i]]) for i in held]
    return float(np.mean(aurocs)) if held else float("nan")


Parts = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # network score, nearest-question score, confidence (n,) each


def _parts(network: np.ndarray, kind: str, per_expert: np.ndarray | None, char_probs: np.ndarray | None, exclude: np.ndarray | None) -> Parts:
    """Each question's three kinds of evidence, with the expert ``exclude[i]`` left out of row i (None: as served).

    ``per_expert``: (n, N, K) ``NearestBank.per_expert_top``; None: no nearest-question evidence.
    """
    n = len(network)
    rows = np.arange(n)
    net, top, char = network.astype(np.float64), per_expert, char_probs
    if exclude is not None:
        net = net.copy()
        if kind == "probabilities":
            net = net / np.clip(1.0 - net[rows, exclude], 1e-12, None)[:, None]
        net[rows, exclude] = -np.inf
        if top is not None:
            top = top.copy()
            top[rows, exclude] = -np.inf
        if char is not None:
            char = char / np.clip(1.0 - char[rows, exclude], 1e-12, None)[:, None]
            char[rows, exclude] = 0.0
    if top is None:
        nearest = np.zeros(n)
    else:
        best = np.sort(top.reshape(n, -1), axis=1)[:, -K:]
        nearest = np.nanmean(np.where(np.isfinite(best), best, np.nan), axis=1)
    return net.max(axis=1), nearest, None if char is None else char.max(axis=1)

