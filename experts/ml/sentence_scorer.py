"""Which retrieved sentence answers the question: a scorer over a few generic features, and how it is fitted.

The extractive answer (``experts.ml.extractive``) quotes the best-scoring sentences of the top
passages. ``FEATURES`` are the sentence's cosine with the question, its share of the question's
content words (``overlap``, and ``overlap_gap`` to the best competing sentence, filled by
``compare_candidates``), its passage's rank, where it stands in the passage, whether it or the
sentence before it is a heading or a question, and its length. ``HAND_SET`` is the old hand-set
scorer, ``fit_weights`` fits linear weights, and ``MlpScorer`` (``fit_mlp``: ``MLP_MEMBERS`` small
networks averaged) is what ships as ``DEFAULT_SCORER_FILE`` (figures in docs/EVALUATIONS.md).
``reasons`` explains a choice by the network's gradient at that sentence.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

FEATURES = ("cosine", "overlap", "passage_rank", "first_in_passage", "heading", "question", "log_words", "previous_cosine", "after_question",
            "overlap_gap")
# Features that compare a sentence with the other candidates. Within one question they differ from a
# per-sentence feature by a constant, which a linear listwise score cannot use (softmax ignores
# constants), so the linear fit leaves them at 0 and only the network reads them. Chosen on doc2dial's
# validation split among the candidates listed in docs/EVALUATIONS.md.
LISTWISE = ("overlap_gap",)
HAND_SET = {"cosine": 1.0, "overlap": 0.15, "passage_rank": -0.02}
_ENDS_SENTENCE = (".", "!", "?", ":", ";", ")")
# Chosen on doc2dial's validation split (docs/EVALUATIONS.md, "Tuned constants").
WORDS_CAP = 25
_COLUMN = {name: j for j, name in enumerate(FEATURES)}


def weight_vector(weights: dict[str, float]) -> np.ndarray:
    """``weights`` in ``FEATURES`` order; a feature not named weighs 0."""
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


def compare_candidates(features: np.ndarray) -> np.ndarray:
    """``features`` (every candidate's ``sentence_features`` row, all passages together) with the ``LISTWISE``
    columns filled in place; returned for convenience."""
    if len(features):
        overlap = features[:, _COLUMN["overlap"]]
        features[:, _COLUMN["overlap_gap"]] = overlap - overlap.max()
    return features


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
    "overlap_gap": ("uses the question's own words", ""),
}


def reasons(features: np.ndarray, chosen: int, w: np.ndarray, limit: int = 3) -> list[str]:
    """Why candidate ``chosen`` scored above the others under weights ``w`` (a linear scorer's, or a
    network's ``local_weights`` at ``chosen``): the features that lifted it most against their mean
    over every candidate (weight x difference), as plain phrases, strongest first."""
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
        if phrase and phrase not in out:
            out.append(phrase)
    return out


def _teaching(groups: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The groups (features, F1) with a candidate reaching F1 0.05 (the others teach a fit nothing), as float arrays."""
    kept = [(np.asarray(x, dtype=np.float64), np.asarray(f, dtype=np.float64)) for x, f in groups if len(f) and float(np.max(f)) >= 0.05]
    if not kept:
        raise ValueError("no question has a candidate sentence holding its gold answer: nothing to fit the sentence scorer on")
    return kept


def fit_weights(groups: Sequence[tuple[np.ndarray, np.ndarray]], pull: float = 0.0) -> dict[str, float]:
    """Weights that pick, among each question's candidate sentences, the ones that answer it.

    ``groups``: per question, its candidates' features (``sentence_features`` rows) and each one's
    token F1 against the gold answer. A conditional logit over each question's candidates, with soft
    targets proportional to F1 squared (two sentences that both hold the answer both count), fitted
    by L-BFGS with an L2 pull of strength ``pull`` towards ``HAND_SET``.
    Questions none of whose candidates reaches F1 0.05 teach nothing and are left out. The
    ``LISTWISE`` features are left at 0 (within a question they are a per-sentence feature minus a
    constant: the fit could not tell them apart) and out of the returned weights.
    """
    from scipy.optimize import minimize

    fitted_names = [name for name in FEATURES if name not in LISTWISE]
    columns = [_COLUMN[name] for name in fitted_names]
    w0 = weight_vector(HAND_SET)[columns]
    kept = [(x[:, columns], f) for x, f in _teaching(groups)]
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
    return {name: round(float(v), 3) for name, v in zip(fitted_names, fitted, strict=True)}


def picked_f1(groups: Sequence[tuple[np.ndarray, np.ndarray]], scorer: Any) -> float | None:
    """The mean F1 of the sentence ``scorer`` (any ``load_scorer`` spec, or a ``SentenceModel``) ranks first,
    over the questions with candidates."""
    return best_of_top(groups, scorer, 1)


def best_of_top(groups: Sequence[tuple[np.ndarray, np.ndarray]], scorer: Any, k: int) -> float | None:
    """The mean F1 of the best of the ``k`` sentences ``scorer`` ranks first, over the questions with candidates.

    With ``k`` = 1 it is ``picked_f1``; with ``k`` = ``selection.SHORTLIST`` it is the most
    any judge of that shortlist (the language model's ``select`` decoding) can reach: the ceiling
    of choosing among the scorer's first choices.
    """
    model = load_scorer(scorer)
    scores = []
    for x, f in groups:
        if len(f):
            order = np.argsort(-model.score(np.asarray(x)), kind="stable")[:k]
            scores.append(float(np.asarray(f)[order].max()))
    return float(np.mean(scores)) if scores else None


# --- scorer models -------------------------------------------------------------------------------

class SentenceModel(Protocol):
    """Scores candidate sentences from their ``FEATURES`` rows, and says which features weighed where."""

    def score(self, features: np.ndarray) -> np.ndarray:
        """(n,) one score per row; higher is a better answer."""
        ...

    def local_weights(self, features: np.ndarray, row: int) -> np.ndarray:
        """(len(FEATURES),) the weights of the linear scorer that agrees with this one at ``row``."""
        ...


@dataclass(frozen=True)
class LinearScorer:
    """``features @ weights``."""

    weights: np.ndarray

    def score(self, features: np.ndarray) -> np.ndarray:
        return np.asarray(features, dtype=np.float64) @ self.weights

    def local_weights(self, features: np.ndarray, row: int) -> np.ndarray:
        return self.weights


_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_tanh(z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GELU (tanh form, as ``torch.nn.GELU(approximate="tanh")``) of ``z`` and its derivative."""
    inner = _SQRT_2_OVER_PI * (z + 0.044715 * z**3)
    t = np.tanh(inner)
    value = 0.5 * z * (1.0 + t)
    slope = 0.5 * (1.0 + t) + 0.5 * z * (1.0 - t**2) * _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * z**2)
    return value, slope


@dataclass(frozen=True)
class MlpScorer:
    """``gelu(features @ w1 + b1) @ w2 + b2``: one hidden layer over the raw features (their scaling folded into ``w1``, ``b1``)."""

    w1: np.ndarray  # (len(FEATURES), hidden)
    b1: np.ndarray  # (hidden,)
    w2: np.ndarray  # (hidden,)
    b2: float = 0.0
    report: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.w1.shape != (len(FEATURES), len(self.b1)) or self.w2.shape != self.b1.shape:
            raise ValueError(f"a sentence scorer network needs w1 ({len(FEATURES)}, h), b1 (h,) and w2 (h,); got {self.w1.shape}, {self.b1.shape}, {self.w2.shape}")
        if not all(np.isfinite(a).all() for a in (self.w1, self.b1, self.w2)) or not math.isfinite(self.b2):
            raise ValueError("a sentence scorer network's parameters must be finite numbers")

    def score(self, features: np.ndarray) -> np.ndarray:
        hidden, _ = _gelu_tanh(np.asarray(features, dtype=np.float64) @ self.w1 + self.b1)
        return hidden @ self.w2 + self.b2

    def local_weights(self, features: np.ndarray, row: int) -> np.ndarray:
        _, slope = _gelu_tanh(np.asarray(features, dtype=np.float64)[row] @ self.w1 + self.b1)
        return self.w1 @ (slope * self.w2)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "mlp", "features": list(FEATURES), "w1": self.w1.round(6).tolist(), "b1": self.b1.round(6).tolist(),
                "w2": self.w2.round(6).tolist(), "b2": round(float(self.b2), 6), "report": self.report}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MlpScorer:
        """The network ``to_dict`` wrote. One fitted before a feature was added (its ``features`` a subset of
        ``FEATURES``) reads as it scored: the features it never saw get first-layer rows of 0."""
        names = data.get("features")
        if not isinstance(names, list) or not names or len(set(map(str, names))) != len(names) or not set(map(str, names)) <= set(FEATURES):
            raise ValueError(f"this sentence scorer was fitted on features {names}, not a subset of {list(FEATURES)}: fit it again")
        try:
            given = np.asarray(data["w1"], dtype=np.float64)
            if given.ndim != 2 or given.shape[0] != len(names):
                raise ValueError(f"a sentence scorer network needs one w1 row per feature ({len(names)}); got shape {given.shape}")
            w1 = np.zeros((len(FEATURES), given.shape[1]))
            w1[[_COLUMN[name] for name in names]] = given
            return cls(w1, np.asarray(data["b1"], dtype=np.float64), np.asarray(data["w2"], dtype=np.float64), float(data.get("b2", 0.0)),
                       dict(data.get("report") or {}))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a sentence scorer network (needs w1, b1, w2): {exc}") from None


# Chosen on doc2dial's validation split (see the module docstring).
MLP_HIDDEN = 8
MLP_MEMBERS = 5
MLP_EPOCHS = 20
MLP_WEIGHT_DECAY = 1e-2
MLP_LEARNING_RATE = 3e-3
MLP_BATCH = 32
DEFAULT_SCORER_FILE = Path(__file__).with_name("sentence_scorer.json")


def fit_mlp(groups: Sequence[tuple[np.ndarray, np.ndarray]], *, hidden: int = MLP_HIDDEN, members: int = MLP_MEMBERS, epochs: int = MLP_EPOCHS,
            weight_decay: float = MLP_WEIGHT_DECAY, learning_rate: float = MLP_LEARNING_RATE, seed: int = 0) -> MlpScorer:
    """``MlpScorer`` fitted as ``fit_weights`` is (the same groups, soft targets and left-out questions), by Adam
    on the listwise loss: ``members`` networks from seeds ``seed, seed + 1, ...``, averaged into one."""
    import torch

    kept = _teaching(groups)
    rows = np.concatenate([x for x, _ in kept])
    mean, scale = rows.mean(axis=0), rows.std(axis=0) + 1e-6
    width = max(len(f) for _, f in kept)
    x_pad = np.zeros((len(kept), width, len(FEATURES)), np.float32)
    t_pad = np.zeros((len(kept), width), np.float32)
    mask = np.zeros((len(kept), width), bool)
    for i, (x, f) in enumerate(kept):
        x_pad[i, : len(f)] = (x - mean) / scale
        t_pad[i, : len(f)] = f**2 / float((f**2).sum())
        mask[i, : len(f)] = True
    xs, ts, ms = torch.from_numpy(x_pad), torch.from_numpy(t_pad), torch.from_numpy(mask)
    w1, b1, w2, b2 = [], [], [], 0.0
    for member in range(members):
        torch.manual_seed(seed + member)
        net = torch.nn.Sequential(torch.nn.Linear(len(FEATURES), hidden), torch.nn.GELU(approximate="tanh"), torch.nn.Linear(hidden, 1))
        optimiser = torch.optim.Adam(net.parameters(), lr=learning_rate, weight_decay=weight_decay)
        order = np.random.default_rng(seed + member)
        for _ in range(epochs):
            perm = torch.from_numpy(order.permutation(len(kept)))
            for start in range(0, len(kept), MLP_BATCH):
                batch = perm[start : start + MLP_BATCH]
                scores = net(xs[batch]).squeeze(-1).masked_fill(~ms[batch], -1e9)
                loss = -(ts[batch] * torch.log_softmax(scores, dim=1).masked_fill(~ms[batch], 0.0)).sum(dim=1).mean()
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        first, last = net[0], net[2]
        w = first.weight.detach().double().numpy().T  # (features, hidden) on the scaled features
        w1.append(w / scale[:, None])
        b1.append(first.bias.detach().double().numpy() - (mean / scale) @ w)
        w2.append(last.weight.detach().double().numpy()[0] / members)
        b2 += float(last.bias.detach()) / members
    report = {"hidden": hidden, "members": members, "epochs": epochs, "weight_decay": weight_decay, "learning_rate": learning_rate,
              "seed": seed, "questions": len(kept)}
    return MlpScorer(np.concatenate(w1, axis=1), np.concatenate(b1), np.concatenate(w2), b2, report)


@functools.lru_cache(maxsize=8)
def scorer_file(path: str | Path) -> MlpScorer:
    """The scorer saved in ``path``, read once per process (as settings are: a new file needs a restart).

    Every answer asks for its scorer: a file system call per answer cost ~28 us of it."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read the sentence scorer {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a sentence scorer (a JSON object)")
    return MlpScorer.from_dict(data)


def load_scorer(spec: SentenceModel | str | dict[str, Any] | None = None) -> SentenceModel:
    """The sentence scorer ``spec`` names: a scorer itself as it is, None or ``"default"`` the shipped network (``DEFAULT_SCORER_FILE``),
    any other string the path of a file holding a network, an object with ``"kind": "mlp"`` a network
    (``MlpScorer.to_dict``), an object of numbers by feature a linear scorer with those weights (the baselines of
    ``evaluate sentences``). Raises ValueError for anything else."""
    if hasattr(spec, "score"):
        return spec  # type: ignore[return-value]
    if spec is None or spec == "default":
        return scorer_file(DEFAULT_SCORER_FILE)
    if isinstance(spec, str):
        return scorer_file(spec)
    if isinstance(spec, dict) and spec.get("kind") == "mlp":
        return MlpScorer.from_dict(spec)
    if isinstance(spec, dict) and all(isinstance(v, int | float) and not isinstance(v, bool) for v in spec.values()):
        return LinearScorer(weight_vector(spec))
    raise ValueError('a sentence scorer is "default", a saved network or the path of one, or a JSON object of numbers by feature')
