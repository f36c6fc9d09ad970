"""The in-scope score: how much a question looks like what the experts were trained on.

The router abstains below a threshold on this score, so it decides which questions get "No expert
covers this question". Three kinds of evidence go into it:

* the network's own (the similarity to the nearest prototype: k-means centres of each expert's
  training questions, ~10 questions a centre);
* the nearest training questions themselves (the mean cosine of the ``NEAREST_K`` most similar ones
  in a bank of at most ``TrainConfig.nearest_bank_max`` training questions): finer than centres,
  which average long, varied questions into points no real question sits near;
* the character view's confidence, for questions whose spelling the sentence encoder loses.

``score = (1 - mix) * network + mix * nearest + char_scale * confidence``. Which mix and scale a
router uses is fitted on its own validation questions (``fit_in_scope``). No validation split holds
out-of-scope questions, so each expert in turn plays the out-of-scope one: its validation questions
are scored as if it did not exist (its prototypes and bank rows left out, the other experts' character
view probabilities renormalised), against the other experts' validation questions scored as served.
The (mix, scale) with the highest mean AUROC over those held-out experts wins (``IN_SCOPE_RULE``).

Why: the earlier score (network + confidence, the confidence scaled to the network's spread) gave
doc2dial's questions against clinc150's out-of-scope ones an AUROC of 0.943, where plain
nearest-example routing gets 0.978; there the character view's confidence alone scores 0.72 and
drags the sum down. Which evidence helps differs between datasets (on clinc150 the confidence
helps), and the held-out-expert AUROC on validation ranks the choices as the real out-of-scope
questions do on both: on doc2dial it picks no confidence, on clinc150 half of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

NEAREST_K = 5
NEAREST_MIXES = (0.0, 0.5, 1.0)
CHAR_SCALES = (0.0, 0.25, 0.5, 1.0)  # times the network score's spread over the confidence's, on validation
IN_SCOPE_RULE = "highest mean AUROC on validation questions, each expert in turn held out as out-of-scope"


@dataclass
class InScope:
    """A fitted in-scope score: the mix of network and nearest-example evidence, and the confidence's weight."""

    mix: float = 0.0
    char_scale: float = 0.0
    bank: np.ndarray | None = None  # (M, D) unit-length training vectors; None: no nearest-example evidence
    report: dict[str, Any] = field(default_factory=dict)
    bank_y: np.ndarray | None = None  # (M,) the bank rows' experts (to score a question as if its expert did not exist)

    def describe(self, network: str) -> str:
        """What the score reads, e.g. ``prototype_similarity+nearest_questions`` (``network``: the network's score's name)."""
        parts = ([network] if self.mix < 1.0 else []) + (["nearest_questions"] if self.mix else []) + (["char_confidence"] if self.char_scale else [])
        return "+".join(parts)

    def nearest(self, x: np.ndarray) -> np.ndarray:
        """(n,) mean cosine of each row of ``x`` with its ``NEAREST_K`` nearest bank rows."""
        if self.bank is None:
            raise ValueError("this in-scope score has no bank of training questions")
        return top_k_mean(np.atleast_2d(x).astype(np.float32, copy=False) @ self.bank.T, NEAREST_K)

    def nearest_one(self, vector: np.ndarray) -> float:
        sims = self.bank @ vector  # type: ignore[union-attr]
        k = min(NEAREST_K, sims.shape[0])
        return float(np.partition(sims, sims.shape[0] - k)[-k:].mean())

    def combine(self, network: np.ndarray, x: np.ndarray, confidence: np.ndarray | None) -> np.ndarray:
        """In-scope scores (n,) from the network's scores, the embeddings and the confidence (or None)."""
        score = np.asarray(network, dtype=np.float64)
        if self.mix and self.bank is not None:
            score = (1.0 - self.mix) * score + self.mix * self.nearest(x)
        if confidence is not None and self.char_scale:
            score = score + self.char_scale * confidence
        return score

    def held_out(self, network: np.ndarray, kind: str, x: np.ndarray, y: np.ndarray, char_probs: np.ndarray | None) -> np.ndarray:
        """(n,) each question's score as if its own expert ``y[i]`` did not exist (see ``fit_in_scope`` for the arguments).

        What a caller that adds evidence of its own to this score (``routing.ml.knowledge``) fits
        the evidence's weight on, as ``fit_in_scope`` did.
        """
        per_expert = None
        if self.mix and self.bank is not None:
            if self.bank_y is None:
                raise ValueError("this in-scope score does not know its bank rows' experts")
            per_expert = _per_expert_top(x, self.bank, self.bank_y, network.shape[1])
        return _score(_parts(network, kind, per_expert, char_probs, np.asarray(y)), self.mix, self.char_scale)

    def combine_one(self, network: float, vector: np.ndarray, confidence: float | None) -> float:
        score = network
        if self.mix and self.bank is not None:
            score = (1.0 - self.mix) * score + self.mix * self.nearest_one(vector)
        if confidence is not None and self.char_scale:
            score += self.char_scale * confidence
        return score


def top_k_mean(sims: np.ndarray, k: int) -> np.ndarray:
    k = min(k, sims.shape[1])
    if k == 0:
        return np.full(sims.shape[0], -1.0)
    return np.partition(sims, sims.shape[1] - k, axis=1)[:, -k:].mean(axis=1)


def nearest_bank(x: np.ndarray, y: np.ndarray, n_experts: int, cap: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """At most ``cap`` training vectors (unit length, float32) and their experts: every expert in
    proportion to its questions, at least one each (a seeded sample where there are more)."""
    if cap <= 0 or len(x) == 0:
        raise ValueError("the bank needs training questions and a positive cap")
    rng = np.random.default_rng(seed)
    members = [np.nonzero(y == i)[0] for i in range(n_experts)]
    takes = [min(len(m), max(1, round(cap * len(m) / len(x)))) if len(m) else 0 for m in members]
    while sum(takes) > max(cap, sum(t > 0 for t in takes)):  # rounding up the small experts: the largest gives back
        takes[int(np.argmax(takes))] -= 1
    rows = np.sort(np.concatenate([rng.permutation(m)[:t] for m, t in zip(members, takes, strict=True)]))
    bank = np.asarray(x[rows], dtype=np.float32)
    norms = np.linalg.norm(bank, axis=1, keepdims=True)
    return np.ascontiguousarray(bank / np.where(norms > 0, norms, 1.0)), np.asarray(y[rows])


def fit_in_scope(
    network: np.ndarray, network_kind: str, x: np.ndarray, y: np.ndarray, bank: np.ndarray, bank_y: np.ndarray,
    char_probs: np.ndarray | None, char_spread_ratio: float,
) -> InScope:
    """Choose the mix and the confidence's weight on the validation questions as written (``IN_SCOPE_RULE``).

    Args:
        network: (n, N) the network's per-expert evidence for each validation question: prototype
            similarities (``network_kind="prototypes"``: the score is their max) or calibrated
            probabilities (``"probabilities"``: the score is the highest).
        x, y: the validation questions' embeddings and experts.
        bank, bank_y: the training questions the nearest-example evidence reads (``nearest_bank``).
        char_probs: (n, N) the character view's probabilities, or None without one.
        char_spread_ratio: the network score's spread over the confidence's, on validation; each of
            ``CHAR_SCALES`` is a multiple of it.
    """
    n, n_experts = network.shape
    if len(x) != n or len(y) != n or (char_probs is not None and char_probs.shape != network.shape):
        raise ValueError("every validation question needs its network evidence, embedding, expert and character view probabilities")
    held = [i for i in range(n_experts) if (y == i).any() and (y != i).any()]
    if not held:
        return InScope(0.0, float(char_spread_ratio), None, {"rule": IN_SCOPE_RULE, "skipped": "validation holds fewer than two experts"})
    per_expert = _per_expert_top(x, bank, bank_y, n_experts)
    served = _parts(network, network_kind, per_expert, char_probs, None)
    without = _parts(network, network_kind, per_expert, char_probs, y)
    scales = CHAR_SCALES if char_probs is not None else (0.0,)
    candidates = []
    for mix in NEAREST_MIXES:
        for factor in scales:
            scale = factor * char_spread_ratio
            candidates.append({"mix": mix, "char_scale_factor": factor, "char_scale": scale,
                               "auroc": held_out_auroc(_score(served, mix, scale), _score(without, mix, scale), y)})
    best = max(candidates, key=lambda c: c["auroc"])  # ties: the first (less nearest-example evidence, less confidence)
    report = {"rule": IN_SCOPE_RULE, "held_out_experts": len(held), "bank": len(bank), "k": NEAREST_K, "candidates": candidates}
    if not best["mix"]:
        bank, bank_y = None, None
    return InScope(float(best["mix"]), float(best["char_scale"]), bank, report, bank_y)


def held_out_auroc(served: np.ndarray, without: np.ndarray, y: np.ndarray) -> float:
    """Mean over experts of the AUROC of the others' questions (``served`` scores) against the expert's
    own questions scored as if it did not exist (``without``): ``IN_SCOPE_RULE``'s figure."""
    held = [i for i in np.unique(y) if (y != i).any()]
    return float(np.mean([_auroc(served[y != i], without[y == i]) for i in held])) if held else float("nan")


def _per_expert_top(x: np.ndarray, bank: np.ndarray, bank_y: np.ndarray, n_experts: int) -> np.ndarray:
    """(n, N, K) each question's ``NEAREST_K`` best similarities within each expert's bank rows (-inf
    padded): the nearest-example evidence with any one expert left out is read from it."""
    sims = np.asarray(x, dtype=np.float32) @ bank.T
    per_expert = np.full((len(x), n_experts, NEAREST_K), -np.inf, dtype=np.float64)
    for i in range(n_experts):
        cols = sims[:, bank_y == i]
        k = min(NEAREST_K, cols.shape[1])
        if k:
            per_expert[:, i, :k] = np.partition(cols, cols.shape[1] - k, axis=1)[:, -k:]
    return per_expert


Parts = tuple[np.ndarray, np.ndarray, np.ndarray | None]  # network score, nearest-example score, confidence (n,) each


def _parts(network: np.ndarray, kind: str, per_expert: np.ndarray | None, char_probs: np.ndarray | None, exclude: np.ndarray | None) -> Parts:
    """Each question's three kinds of evidence, with the expert ``exclude[i]`` left out of row i (None: as served)."""
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
        best = np.sort(top.reshape(n, -1), axis=1)[:, -NEAREST_K:]
        nearest = np.nanmean(np.where(np.isfinite(best), best, np.nan), axis=1)
    return net.max(axis=1), nearest, None if char is None else char.max(axis=1)


def _score(parts: Parts, mix: float, scale: float) -> np.ndarray:
    network, nearest, confidence = parts
    score = (1.0 - mix) * network + mix * nearest if mix else network.copy()
    if confidence is not None and scale:
        score = score + scale * confidence
    return score


def _auroc(positive: np.ndarray, negative: np.ndarray) -> float:
    """P(a positive scores above a negative), ties counting half (the Mann-Whitney statistic)."""
    from scipy.stats import rankdata

    ranks = rankdata(np.r_[positive, negative])
    n_pos, n_neg = len(positive), len(negative)
    return float((ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
