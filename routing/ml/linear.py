"""The router's linear head: multinomial logistic regression on the embeddings, its C chosen on validation.

``train_text_router`` (``routing.ml.textrouter``) fits one beside the MLP on the same training rows
and serves whichever gives the better validation macro-F1; ``evaluate router``'s logistic-regression
baseline is this same fit. ``LINEAR_CS`` spans weak to almost no regularisation (scikit-learn's C is
the inverse of the L2 penalty's strength); the C with the best validation macro-F1 wins (ties: the
smaller C, the simpler model).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .router import RouterNet

LINEAR_CS = (0.1, 1.0, 10.0, 100.0)
MAX_ITER = 500


def fit_linear(x_train: np.ndarray, y_train: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, cs: tuple[float, ...] = LINEAR_CS,
               seed: int = 0) -> tuple[Any, dict[str, Any]]:
    """Logistic regression on ``x_train`` at each C of ``cs``; the one with the best macro-F1 on ``x_val``.

    Returns the fitted scikit-learn model and ``{"C", "val_macro_f1", "val_accuracy", "tried"}``.
    The fits run from the smallest C up, each warm-started from the one before (the same optimum, sooner).
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    if not cs:
        raise ValueError("fit_linear needs at least one C")
    model = LogisticRegression(max_iter=MAX_ITER, warm_start=True, random_state=seed)
    tried, best = [], None
    for c in sorted(cs):
        model.set_params(C=c)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # MAX_ITER bounds the job's time; the figure below is what counts
            model.fit(x_train, y_train)
        pred = model.predict(x_val)
        row = {"C": c, "val_macro_f1": float(f1_score(y_val, pred, average="macro", zero_division=0)), "val_accuracy": float((pred == y_val).mean())}
        tried.append(row)
        if best is None or row["val_macro_f1"] > best[0]["val_macro_f1"]:
            best = (row, {"coef": model.coef_.copy(), "intercept": model.intercept_.copy(), "classes": model.classes_.copy()})
    assert best is not None
    model.coef_, model.intercept_, model.classes_ = best[1]["coef"], best[1]["intercept"], best[1]["classes"]
    model.set_params(C=best[0]["C"])
    return model, {**best[0], "tried": tried}


def linear_router(model: Any, n_experts: int, like: RouterNet | None = None) -> RouterNet:
    """A ``RouterNet`` with a linear head holding ``model``'s weights (prototypes copied from ``like``, if it has them).

    Two classes: scikit-learn keeps one row of weights (class 1 against class 0); class 0 gets zeros,
    which gives the same probabilities under the softmax.
    """
    coef, intercept = np.asarray(model.coef_, dtype=np.float32), np.asarray(model.intercept_, dtype=np.float32)
    classes = [int(c) for c in model.classes_]
    if coef.shape[0] == 1 and len(classes) == 2:
        coef, intercept = np.vstack([np.zeros_like(coef), coef]), np.r_[np.float32(0.0), intercept]
    weight = np.zeros((n_experts, coef.shape[1]), dtype=np.float32)
    bias = np.full(n_experts, -1e4, dtype=np.float32)  # an expert the fit never saw is never chosen
    weight[classes], bias[classes] = coef, intercept
    per_expert = like.prototypes_per_expert if like is not None and like.has_prototypes else 0
    net = RouterNet(input_dim=coef.shape[1], n_experts=n_experts, use_conv=False, prototypes_per_expert=per_expert, head="linear")
    with torch.no_grad():
        net.linear.weight.copy_(torch.from_numpy(weight))
        net.linear.bias.copy_(torch.from_numpy(bias))
        if per_expert and like is not None:
            net.prototypes.copy_(like.prototypes)
            net.prototype_mask.copy_(like.prototype_mask)
    return net.eval()
