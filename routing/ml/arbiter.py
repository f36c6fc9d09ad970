"""Serving-time decisions on top of the router's scores: load penalty, capacity, abstention, failover.

The arbiter keeps a sliding window of the last ``window`` top-1 choices (in process, thread-safe).
An expert's load is its count in the window divided by the window's size, so a window that is still
filling penalises nobody much. Scores are adjusted as ``raw - λ·(load - mean load)``; an expert
whose load is above ``capacity`` is skipped (moved behind the others) unless every expert is over.
Below the abstain threshold on the in-scope score the decision abstains: the caller sends the
question to the fallback expert, or says that no expert covers it.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from dataclasses import dataclass, field

import numpy as np

MAX_TOP_K = 3
LOAD_PENALTY = 0.15
LOAD_PENALTY_EXPERTS = 200


def default_load_penalty(n_experts: int) -> float:
    """λ: 0.15 below 200 experts; above, shrunk as 0.15 · 200 / N.

    With many experts each one's probability and load are both small; shrinking λ keeps the
    penalty from outweighing the router's own preference on the long tail.
    """
    return LOAD_PENALTY if n_experts < LOAD_PENALTY_EXPERTS else LOAD_PENALTY * LOAD_PENALTY_EXPERTS / n_experts


class LoadWindow:
    """The last ``size`` top-1 choices, with counts; safe to share between threads."""

    def __init__(self, size: int = 500):
        if size < 1:
            raise ValueError(f"the load window needs at least one slot, got {size}")
        self.size = size
        self._recent: deque[str] = deque()
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def record(self, expert: str) -> None:
        with self._lock:
            self._recent.append(expert)
            self._counts[expert] += 1
            if len(self._recent) > self.size:
                old = self._recent.popleft()
                self._counts[old] -= 1
                if not self._counts[old]:
                    del self._counts[old]

    def load_array(self, experts: list[str]) -> np.ndarray:
        """Each expert's share of the window's ``size`` slots (not of the slots filled so far), in the order of ``experts``."""
        with self._lock:
            counts = self._counts
            return np.fromiter((counts.get(e, 0) for e in experts), dtype=np.float64, count=len(experts)) / self.size

    def clear(self) -> None:
        with self._lock:
            self._recent.clear()
            self._counts.clear()


@dataclass
class ArbiterDecision:
    """The ranked experts (with their adjusted scores) after load adjustment and capacity, and whether to abstain."""

    ranked: list[tuple[str, float]]
    chosen: list[str]
    abstained: bool


@dataclass
class Arbiter:
    """Adjusts raw router scores for load and capacity, and decides whether to abstain.

    Attributes:
        window: the shared sliding window of recent top-1 choices.
        load_penalty: λ; None means ``default_load_penalty(N)``.
        capacity: the largest share of the window one expert may hold (1.0: no limit).
        abstain_threshold: abstain when the in-scope score is below it (None: never abstain).
    """

    window: LoadWindow = field(default_factory=LoadWindow)
    load_penalty: float | None = None
    capacity: float = 1.0
    abstain_threshold: float | None = None

    def decide(self, raw_scores: dict[str, float], top_k: int = 2, score: float | None = None, record: bool = True,
               threshold: float | None = None) -> ArbiterDecision:
        """Rank the experts for one request.

        Args:
            raw_scores: the router's (calibrated) probability per live expert.
            top_k: how many experts to choose, 1-3.
            score: the in-scope score compared with ``abstain_threshold``.
            record: add the top-1 choice to the load window (not when abstaining).
            threshold: this request's abstain threshold instead of ``abstain_threshold`` (a score
                on another scale, e.g. with knowledge evidence).
        """
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
        if not raw_scores:
            raise ValueError("no experts to choose from")
        experts = list(raw_scores)
        raw = np.fromiter(raw_scores.values(), dtype=np.float64, count=len(experts))
        loads = self.window.load_array(experts)
        lam = default_load_penalty(len(experts)) if self.load_penalty is None else self.load_penalty
        adjusted = raw - lam * (loads - loads.mean())
        # Order: adjusted score, then raw score, then position in ``raw_scores`` (deterministic ties).
        order = np.lexsort((np.arange(len(experts)), -raw, -adjusted))
        over = loads[order] > self.capacity
        if over.any() and not over.all():
            order = np.concatenate([order[~over], order[over]])
        # The adjustment moves an idle expert up and a busy one down by up to λ; the scores shown stay
        # in [0, 1] (an idle expert's 0.9998 + 0.0004 is 1, not 1.0002), the order is the unclipped one.
        shown = np.clip(adjusted, 0.0, 1.0)
        ranked = [(experts[i], float(shown[i])) for i in order]
        bar = self.abstain_threshold if threshold is None else threshold
        abstained = bar is not None and score is not None and score < bar
        if record and not abstained:
            self.window.record(ranked[0][0])
        return ArbiterDecision(ranked=ranked, chosen=[e for e, _ in ranked[:top_k]], abstained=abstained)
