"""``evaluate router --ablate``: the product's router with each of its mechanisms removed, on validation.

Each row retrains ``train_text_router`` with one ``TrainConfig`` field changed (``ABLATIONS``) and
reports validation macro-F1 and accuracy (and typo-copy accuracy) beside the full router's, with
``full minus without``. Validation also made the router's own choices, so every row is flattered
alike; test is not read. With ``--knowledge`` the documents as evidence are ablated too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from routing.ml.textrouter import Embed, train_text_router
from routing.ml.training import TrainConfig

# mechanism -> the TrainConfig change that removes it
ABLATIONS: dict[str, dict[str, Any]] = {
    "typo_copies": {"typo_rate": 0.0},  # training on seeded letter-typo copies of each question
    "char_view": {"char_view": False},  # the spelling view, its blend, and the nearest-question bank and in-scope mix fitted with it
    "nearest_term": {"nearest_term": False},  # the nearest training questions' weight in the logits
    "input_noise": {"input_noise": 0.0},  # Gaussian noise on the training embeddings
    "prototypes": {"prototypes_per_expert": 0},  # the prototype memory (logit term and in-scope score)
    "linear_head": {"linear_head": False},  # the linear head the router serves where validation prefers it
}


def _val(metrics: dict[str, Any]) -> dict[str, Any]:
    view = metrics.get("char_view") or {}
    return {"val_macro_f1": metrics["val"]["macro_f1"], "val_accuracy": metrics["val"]["accuracy"],
            "val_accuracy_typos": view.get("val_accuracy_typos"), "head": (metrics.get("head") or {}).get("chosen")}


def ablate(split: Any, full: dict[str, Any], model_kwargs: dict[str, Any], embed: Embed, seed: int, say: Callable[[str], Any],
           knowledge: dict[str, Any] | None = None) -> dict[str, Any]:
    """The router without each mechanism of ``ABLATIONS``, on ``split``'s validation questions; ``full`` is the full router's metrics."""
    (x_train, y_train), (x_val, y_val) = split.xy("train"), split.xy("val")
    base = _val(full)
    rows: dict[str, Any] = {}
    for name, change in ABLATIONS.items():
        say(f"ablation: the router without {name} ({change})")
        result = train_text_router(split.texts("train"), x_train, y_train, split.texts("val"), x_val, y_val, len(split.classes), embed,
                                   model_kwargs, TrainConfig(seed=seed, **change))
        row = _val(result.metrics)
        row["change"] = change
        row["macro_f1_full_minus_without"] = round(base["val_macro_f1"] - row["val_macro_f1"], 4)
        rows[name] = row
    if knowledge is not None:
        rows["knowledge"] = knowledge
    return {"on": "validation questions as written", "full": base, "without": rows}
