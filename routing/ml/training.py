"""Training the router: cross-entropy plus a load-balancing term, label noise, early stopping.

Load balancing uses the Switch Transformer auxiliary loss, ``N · Σ_i f_i · P_i`` where ``f_i`` is
the share of the batch whose top-1 choice is expert i and ``P_i`` the mean router probability for
i; it is 1 when usage is uniform and grows as traffic concentrates.
"""

from __future__ import annotations

import copy
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .router import RouterNet


@dataclass
class TrainConfig:
    """Training hyper-parameters (all recorded with the run)."""

    epochs: int = 60
    batch_size: int = 64
    lr: float = 3e-3
    weight_decay: float = 1e-4
    balance_weight: float = 0.1
    label_noise: float = 0.0
    noise_kind: str = "uniform"
    gumbel_temperature: float = 0.0
    patience: int = 8
    seed: int = 0
    device: str = "auto"


@dataclass
class TrainResult:
    """The trained model and what happened while training."""

    model: RouterNet
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    metrics: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def switch_balance_loss(logits: torch.Tensor) -> torch.Tensor:
    """Switch Transformer auxiliary loss on a batch of router logits."""
    probs = logits.softmax(dim=-1)
    n = logits.shape[-1]
    top1 = F.one_hot(probs.argmax(dim=-1), n).float()
    return n * (top1.mean(dim=0) * probs.mean(dim=0)).sum()


def inject_label_noise(y: np.ndarray, ratio: float, n_classes: int, rng: np.random.Generator, kind: str = "uniform", confusion: np.ndarray | None = None) -> np.ndarray:
    """Flip ``ratio`` of labels: to a uniformly random other class, or to the most confusable one."""
    y = y.copy()
    if ratio <= 0 or n_classes < 2:
        return y
    flip = rng.random(y.shape[0]) < ratio
    for i in np.nonzero(flip)[0]:
        if kind == "confusable" and confusion is not None:
            row = confusion[y[i]].astype(float).copy()
            row[y[i]] = 0
            y[i] = int(np.argmax(row)) if row.sum() > 0 else (y[i] + rng.integers(1, n_classes)) % n_classes
        else:
            y[i] = (y[i] + rng.integers(1, n_classes)) % n_classes
    return y


def evaluate(model: RouterNet, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Accuracy, top-2 accuracy, macro-F1 and cross-entropy."""
    from sklearn.metrics import f1_score

    model.eval()
    with torch.no_grad():
        logits = model(x)
    loss = float(F.cross_entropy(logits, y))
    pred = logits.argmax(dim=-1)
    k = min(2, logits.shape[-1])
    top2 = logits.topk(k, dim=-1).indices.eq(y.unsqueeze(1)).any(dim=1).float().mean()
    return {
        "loss": loss,
        "accuracy": float((pred == y).float().mean()),
        "top2_accuracy": float(top2),
        "macro_f1": float(f1_score(y.cpu().numpy(), pred.cpu().numpy(), average="macro", zero_division=0)),
    }


def train_router(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n_experts: int, model_kwargs: dict[str, Any] | None = None, config: TrainConfig | None = None) -> TrainResult:
    """Train a ``RouterNet`` and keep the weights of the best validation epoch.

    Args:
        x_train, y_train: embeddings (n, d) and expert indices (n,).
        x_val, y_val: validation split for early stopping.
        n_experts: number of output experts.
        model_kwargs: ``RouterNet`` hyper-parameters.
        config: training hyper-parameters.
    """
    config = config or TrainConfig()
    seed_everything(config.seed)
    device = pick_device(config.device)
    rng = np.random.default_rng(config.seed)
    y_noisy = inject_label_noise(np.asarray(y_train), config.label_noise, n_experts, rng, config.noise_kind)
    model = RouterNet(input_dim=x_train.shape[1], n_experts=n_experts, **(model_kwargs or {})).to(device)
    optimiser = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    xt = torch.as_tensor(x_train, dtype=torch.float32, device=device)
    yt = torch.as_tensor(y_noisy, dtype=torch.long, device=device)
    xv = torch.as_tensor(x_val, dtype=torch.float32, device=device)
    yv = torch.as_tensor(y_val, dtype=torch.long, device=device)
    generator = torch.Generator().manual_seed(config.seed)
    best_state, best_loss, best_epoch, stale = copy.deepcopy(model.state_dict()), float("inf"), 0, 0
    history = []
    for epoch in range(1, config.epochs + 1):
        model.train()
        order = torch.randperm(xt.shape[0], generator=generator).to(device)
        total, batches = 0.0, 0
        for start in range(0, xt.shape[0], config.batch_size):
            idx = order[start : start + config.batch_size]
            logits = model(xt[idx])
            if config.gumbel_temperature > 0:
                gumbel = -torch.log(-torch.log(torch.rand_like(logits).clamp_min(1e-9)).clamp_min(1e-9))
                logits = logits + config.gumbel_temperature * gumbel
            loss = F.cross_entropy(logits, yt[idx]) + config.balance_weight * switch_balance_loss(logits)
            optimiser.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
            total, batches = total + float(loss.detach()), batches + 1
        val = evaluate(model, xv, yv)
        history.append({"epoch": epoch, "train_loss": total / max(1, batches), "val_loss": val["loss"], "val_accuracy": val["accuracy"]})
        if val["loss"] < best_loss - 1e-4:
            best_state, best_loss, best_epoch, stale = copy.deepcopy(model.state_dict()), val["loss"], epoch, 0
        else:
            stale += 1
            if stale >= config.patience:
                break
    model.load_state_dict(best_state)
    model = model.cpu().eval()
    metrics = {"val": evaluate(model, xv.cpu(), yv.cpu()), "device": str(device), "epochs_run": len(history)}
    return TrainResult(model=model, history=history, best_epoch=best_epoch, metrics=metrics, config=asdict(config))


def predict_proba(model: RouterNet, x: np.ndarray) -> np.ndarray:
    """Expert probabilities for embeddings ``x``."""
    model.eval()
    with torch.no_grad():
        return model(torch.as_tensor(x, dtype=torch.float32)).softmax(dim=-1).numpy()
