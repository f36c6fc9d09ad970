"""Training the router: cross-entropy plus a load-balancing term, label noise, early stopping, calibration.

Load balancing uses the Switch Transformer auxiliary loss, ``N · Σ_i f_i · P_i`` where ``f_i`` is
the share of the batch whose top-1 choice is expert i and ``P_i`` the mean router probability for
i; it is 1 when usage is uniform and grows as traffic concentrates.

After the MLP has trained, ``train_router`` builds the prototype memory (k-means centroids of each
expert's training queries) and fits three numbers on the validation split, never on test data: the
weight of the prototype similarities in the logits, the softmax temperature, and the abstain
threshold on the in-scope score (the score that keeps ``target_recall`` of in-scope validation
queries).
"""

from __future__ import annotations

import copy
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .diagnostics import fit_temperature, nll
from .router import RouterNet

# Earlier user turns of a conversation that the context path reads (the serving path cuts to the same).
CONTEXT_TURNS = 5

PROTOTYPE_WEIGHTS = (0.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
# The fingerprint without the convolution: chosen on the validation splits of clinc150 and hwu64
# (docs/EVALUATIONS.md, "Tuned constants"); `evaluate router --variants` reports both.
DEFAULT_MODEL_KWARGS: dict[str, Any] = {"use_conv": False}


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite: the run is aborted and nothing may be activated."""


@dataclass
class TrainConfig:
    """Training hyper-parameters (all recorded with the run).

    ``input_noise`` adds Gaussian noise of that relative norm to each training embedding and
    re-normalises it (0.8: chosen on the validation splits of clinc150 and hwu64, docs/EVALUATIONS.md).
    ``label_noise`` (DisturbLabel) and ``gumbel_temperature`` are off by default. ``threads`` is
    torch's intra-op thread count while training (0 leaves it alone; small batches run best on one).
    """

    epochs: int = 60
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    balance_weight: float = 0.1
    label_noise: float = 0.0
    noise_kind: str = "uniform"
    gumbel_temperature: float = 0.0
    input_noise: float = 0.8
    context_dropout: float = 0.3
    patience: int = 8
    seed: int = 0
    device: str = "auto"
    prototypes_per_expert: int = 32
    max_prototypes: int = 4096
    target_recall: float = 0.95
    threads: int = 1
    # ``train_text_router``: a copy of every question with this share of letter typos, and the character
    # view; chosen on clinc150's validation split (docs/EVALUATIONS.md, "Tuned constants").
    typo_rate: float = 0.1
    typo_copies_max: int = 30_000  # at most this many copies (a seeded sample; 0: one of every question)
    char_view: bool = True
    # The in-scope score's nearest-example evidence reads at most this many training questions (a
    # seeded sample, every expert in proportion): ~0.07 ms a question at 4,096 x 384 (routing.ml.inscope).
    nearest_bank_max: int = 4096
    # The nearest training questions' weight in the logits is chosen on validation (``fit_nearest_weight``);
    # False keeps it at 0 (``evaluate router --ablate``).
    nearest_term: bool = True
    # ``train_text_router`` also fits a linear head (logistic regression, C among ``linear_cs`` on
    # validation) and serves it where its validation macro-F1 is the better one (``routing.ml.linear``).
    linear_head: bool = True
    linear_cs: tuple[float, ...] = (0.1, 1.0, 10.0, 100.0)


@dataclass
class TrainResult:
    """The trained model and what happened while training."""

    model: RouterNet
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


@dataclass
class Context:
    """Embeddings of previous conversation turns: ``turns`` (n, T, D) zero-padded, ``lengths`` (n,)."""

    turns: np.ndarray
    lengths: np.ndarray

    def rows(self, idx: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.as_tensor(self.turns[idx], dtype=torch.float32), torch.as_tensor(self.lengths[idx], dtype=torch.long)


def switch_balance_loss(logits: torch.Tensor) -> torch.Tensor:
    """Switch Transformer auxiliary loss on a batch of router logits."""
    probs = logits.softmax(dim=-1)
    n = logits.shape[-1]
    top1 = F.one_hot(probs.argmax(dim=-1), n).float()
    return n * (top1.mean(dim=0) * probs.mean(dim=0)).sum()


def inject_label_noise(y: np.ndarray, ratio: float, n_classes: int, rng: np.random.Generator) -> np.ndarray:
    """Flip ``ratio`` of labels, each to a uniformly random other class (the only ``noise_kind`` training implements)."""
    y = y.copy()
    if ratio <= 0 or n_classes < 2:
        return y
    flip = rng.random(y.shape[0]) < ratio
    for i in np.nonzero(flip)[0]:
        y[i] = (y[i] + rng.integers(1, n_classes)) % n_classes
    return y


def validate_training_data(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n_experts: int) -> None:
    """Raise ``ValueError`` with a clear message for data a router cannot be trained on."""
    if n_experts < 2:
        raise ValueError(f"a router needs at least two experts, got {n_experts}")
    for name, x, y in (("training", x_train, y_train), ("validation", x_val, y_val)):
        if x.ndim != 2 or y.ndim != 1 or x.shape[0] != y.shape[0]:
            raise ValueError(f"{name} embeddings {x.shape} and labels {y.shape} do not match")
        if x.shape[0] == 0:
            raise ValueError(f"the {name} split is empty")
        if not np.isfinite(x).all():
            raise ValueError(f"{name} embeddings contain NaN or infinite values")
        if y.min() < 0 or y.max() >= n_experts:
            raise ValueError(f"{name} labels must be expert indices in [0, {n_experts}), got {y.min()}..{y.max()}")
    if x_train.shape[1] != x_val.shape[1]:
        raise ValueError(f"training embeddings have {x_train.shape[1]} dimensions, validation {x_val.shape[1]}")
    missing = sorted(set(range(n_experts)) - set(np.unique(y_train).tolist()))
    if missing:
        raise ValueError(f"experts {missing} have no training examples; drop them or label some queries for them")


def _logits(model: RouterNet, x: torch.Tensor, context: Context | None, mlp_only: bool = False) -> torch.Tensor:
    ctx, lengths = (None, None) if context is None else context.rows(slice(None))
    if ctx is not None:
        ctx = ctx.to(x.device)
    return model.mlp_logits(x, ctx, lengths) if mlp_only else model(x, ctx, lengths)


def probability_metrics(probs: np.ndarray, y: np.ndarray) -> dict[str, float]:
    """Accuracy, top-2 accuracy, macro-F1 and cross-entropy of calibrated probabilities ``probs`` (n, N)."""
    from sklearn.metrics import f1_score

    pred = probs.argmax(axis=1)
    top2 = np.argsort(-probs, axis=1)[:, : min(2, probs.shape[1])]
    return {
        "loss": float(-np.log(np.clip(probs[np.arange(len(y)), y], 1e-12, None)).mean()),
        "accuracy": float((pred == y).mean()),
        "top2_accuracy": float((top2 == y[:, None]).any(axis=1).mean()),
        "macro_f1": float(f1_score(y, pred, average="macro", zero_division=0)),
    }


def evaluate(model: RouterNet, x: torch.Tensor, y: torch.Tensor, context: Context | None = None) -> dict[str, float]:
    """``probability_metrics`` of the network's uncalibrated probabilities (the cross-entropy of its logits as they are)."""
    model.eval()
    with torch.no_grad():
        logits = _logits(model, x, context)
    return {**probability_metrics(logits.double().softmax(dim=-1).numpy(), y.cpu().numpy()), "loss": float(F.cross_entropy(logits, y))}


def build_prototypes(x: np.ndarray, y: np.ndarray, n_experts: int, per_expert: int, max_total: int, seed: int = 0) -> list[np.ndarray]:
    """Unit-length k-means centroids of each expert's training embeddings.

    Each expert gets ``min(per_expert, n_i // 10, max_total // n_experts)`` centroids (at least one):
    about ten queries per centroid keeps them averages rather than copies of single (possibly
    mislabelled) queries, and ``max_total`` bounds the serving cost.
    """
    from sklearn.cluster import KMeans

    cap = max(1, min(per_expert, max_total // n_experts))
    out = []
    for i in range(n_experts):
        xi = x[y == i]
        k = max(1, min(cap, xi.shape[0] // 10))
        if k == 1:
            centres = xi.mean(axis=0, keepdims=True)
        else:
            centres = KMeans(n_clusters=k, n_init=1, random_state=seed).fit(xi).cluster_centers_
        norms = np.linalg.norm(centres, axis=1, keepdims=True)
        out.append((centres / np.where(norms > 0, norms, 1.0)).astype(np.float32))
    return out


def abstain_threshold(scores: np.ndarray, target_recall: float) -> float:
    """The in-scope score that keeps ``target_recall`` of in-scope queries (those at or above it)."""
    if scores.size == 0:
        return float("-inf")
    return float(np.quantile(scores, 1.0 - target_recall, method="lower"))


def calibrate(model: RouterNet, x_val: np.ndarray, y_val: np.ndarray, target_recall: float, context_val: Context | None = None) -> dict[str, Any]:
    """Fit the prototype weight, the temperature and the abstain threshold on validation data.

    The prototype weight is the one of ``PROTOTYPE_WEIGHTS`` with the best validation accuracy
    (ties: lowest calibrated NLL); the temperature minimises validation NLL; the threshold keeps
    ``target_recall`` of validation queries in scope. Sets them on ``model`` and returns them.
    """
    model.eval()
    xv = torch.as_tensor(x_val, dtype=torch.float32)
    with torch.no_grad():
        mlp = _logits(model, xv, context_val, mlp_only=True).numpy().astype(np.float64)
        sims = model.prototype_similarity(xv).numpy().astype(np.float64) if model.has_prototypes else None
    candidates = []
    for weight in PROTOTYPE_WEIGHTS if sims is not None else (0.0,):
        logits = mlp + weight * sims if sims is not None else mlp
        temperature = fit_temperature(logits, y_val)
        accuracy = float((logits.argmax(axis=1) == y_val).mean())
        candidates.append((-accuracy, nll(logits, y_val, temperature), weight, temperature, accuracy))
    _, best_nll, weight, temperature, accuracy = min(candidates)
    model.prototype_weight, model.temperature = float(weight), float(temperature)
    with torch.no_grad():
        ctx = None if context_val is None else context_val.rows(slice(None))
        _, scores = model.route_scores(xv, *(ctx or (None, None)))
    threshold = abstain_threshold(scores.numpy(), target_recall)
    return {
        "prototype_weight": float(weight),
        "temperature": float(temperature),
        "val_accuracy": accuracy,
        "val_nll_calibrated": float(best_nll),
        "abstain_threshold": threshold,
        "abstain_score": "prototype_similarity" if sims is not None else "max_probability",
        "abstain_target_recall": target_recall,
        "prototype_weight_search": [{"weight": c[2], "val_accuracy": c[4], "val_nll": c[1]} for c in candidates],
    }


def train_router(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_val: np.ndarray,
    y_val: np.ndarray,
    n_experts: int,
    model_kwargs: dict[str, Any] | None = None,
    config: TrainConfig | None = None,
    context_train: Context | None = None,
    context_val: Context | None = None,
) -> TrainResult:
    """Train a ``RouterNet``, keep the weights of the best validation epoch, then calibrate it.

    Args:
        x_train, y_train: embeddings (n, d) and expert indices (n,).
        x_val, y_val: validation split for early stopping and calibration.
        n_experts: number of output experts (at least two, each with training examples).
        model_kwargs: ``RouterNet`` hyper-parameters.
        config: training hyper-parameters.
        context_train, context_val: previous turns per query, for a router with ``context_dim > 0``.

    Raises:
        ValueError: data a router cannot be trained on (one expert, an expert without examples,
            NaN embeddings, labels out of range, an empty split).
        TrainingDiverged: the loss became NaN or infinite.
    """
    config = config or TrainConfig()
    x_train, x_val = np.asarray(x_train, dtype=np.float32), np.asarray(x_val, dtype=np.float32)
    y_train, y_val = np.asarray(y_train, dtype=np.int64), np.asarray(y_val, dtype=np.int64)
    validate_training_data(x_train, y_train, x_val, y_val, n_experts)
    previous_threads = torch.get_num_threads()
    if config.threads > 0:
        torch.set_num_threads(config.threads)
    try:
        return _train(x_train, y_train, x_val, y_val, n_experts, model_kwargs, config, context_train, context_val)
    finally:
        torch.set_num_threads(previous_threads)


def _train(
    x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n_experts: int, model_kwargs: dict[str, Any] | None,
    config: TrainConfig, context_train: Context | None, context_val: Context | None,
) -> TrainResult:
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device)
    rng = np.random.default_rng(config.seed)
    kwargs = {"prototypes_per_expert": config.prototypes_per_expert, **(model_kwargs or {})}
    kwargs.pop("prototype_weight", None)
    kwargs.pop("temperature", None)
    model = RouterNet(input_dim=x_train.shape[1], n_experts=n_experts, **kwargs).to(device)
    if model.context_dim and context_train is None:
        raise ValueError("a router with context_dim > 0 needs context_train (previous turns)")
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    xt = torch.as_tensor(x_train, dtype=torch.float32, device=device)
    y_clean = torch.as_tensor(y_train, dtype=torch.long, device=device)
    xv = torch.as_tensor(x_val, dtype=torch.float32, device=device)
    yv = torch.as_tensor(y_val, dtype=torch.long, device=device)
    use_context = bool(model.context_dim) and context_train is not None
    generator = torch.Generator().manual_seed(config.seed)
    best_state, best_loss, best_epoch, stale = copy.deepcopy(model.state_dict()), float("inf"), 0, 0
    history = []
    for epoch in range(1, config.epochs + 1):
        model.train()
        # DisturbLabel: a fresh share of flipped labels every epoch is a regulariser, not corrupted data.
        yt = torch.as_tensor(inject_label_noise(y_train, config.label_noise, n_experts, rng), device=device) if config.label_noise > 0 else y_clean
        order = torch.randperm(xt.shape[0], generator=generator).to(device)
        total, batches = 0.0, 0
        for start in range(0, xt.shape[0], config.batch_size):
            idx = order[start : start + config.batch_size]
            xb = xt[idx]
            if config.input_noise > 0:
                xb = F.normalize(xb + config.input_noise / math.sqrt(xb.shape[1]) * torch.randn_like(xb), dim=-1)
            ctx, lengths = None, None
            if use_context:
                ctx, lengths = context_train.rows(idx.cpu().numpy())  # type: ignore[union-attr]
                keep = torch.rand(lengths.shape[0], generator=generator) >= config.context_dropout
                lengths = lengths * keep  # some questions train without their history, as many arrive
                ctx = ctx.to(device)
            logits = model.mlp_logits(xb, ctx, lengths)
            if config.gumbel_temperature > 0:
                gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-9)).clamp_min(1e-9))
                logits = logits + config.gumbel_temperature * gumbel
            loss = F.cross_entropy(logits, yt[idx]) + config.balance_weight * switch_balance_loss(logits)
            if not torch.isfinite(loss):
                raise TrainingDiverged(f"the training loss became {float(loss.detach())} in epoch {epoch}; lower the learning rate (lr={config.lr}) or check the data")
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            total, batches = total + float(loss.detach()), batches + 1
        model.eval()
        with torch.no_grad():
            val_logits = _logits(model, xv, context_val if use_context else None, mlp_only=True)
        val_loss = float(F.cross_entropy(val_logits, yv))
        if not math.isfinite(val_loss):
            raise TrainingDiverged(f"the validation loss became {val_loss} in epoch {epoch}; lower the learning rate (lr={config.lr})")
        val_accuracy = float((val_logits.argmax(dim=-1) == yv).float().mean())
        history.append({"epoch": epoch, "train_loss": total / max(1, batches), "val_loss": val_loss, "val_accuracy": val_accuracy})
        if val_loss < best_loss - 1e-4:
            best_state, best_loss, best_epoch, stale = copy.deepcopy(model.state_dict()), val_loss, epoch, 0
        else:
            stale += 1
            if stale >= config.patience:
                break
    model.load_state_dict(best_state)
    model = model.cpu().eval()
    if model.prototypes_per_expert:
        model.set_prototypes([torch.from_numpy(p) for p in build_prototypes(x_train, y_train, n_experts, model.prototypes_per_expert, config.max_prototypes, config.seed)])
    calibration = calibrate(model, x_val, y_val, config.target_recall, context_val if use_context else None)
    metrics = {
        "val": evaluate(model, xv.cpu(), yv.cpu(), context_val if use_context else None),
        "device": str(device),
        "epochs_run": len(history),
        **calibration,
    }
    return TrainResult(model=model, history=history, best_epoch=best_epoch, metrics=metrics, config=asdict(config))


def predict_logits(model: RouterNet, x: np.ndarray, context: Context | None = None) -> np.ndarray:
    """Router logits (prototype term included, no temperature) for embeddings ``x``."""
    model.eval()
    with torch.no_grad():
        return _logits(model, torch.as_tensor(x, dtype=torch.float32), context).numpy()


def predict_proba(model: RouterNet, x: np.ndarray, context: Context | None = None) -> np.ndarray:
    """Calibrated expert probabilities for embeddings ``x``."""
    return route_scores(model, x, context)[0]


def route_scores(model: RouterNet, x: np.ndarray, context: Context | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Calibrated probabilities (n, N) and in-scope scores (n,) for embeddings ``x``."""
    model.eval()
    ctx = (None, None) if context is None else context.rows(slice(None))
    with torch.no_grad():
        probs, scores = model.route_scores(torch.as_tensor(x, dtype=torch.float32), *ctx)
    return probs.numpy(), scores.numpy()
