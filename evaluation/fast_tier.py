"""The fast tier (``auto:fast``) in the evaluations: trained as router training trains it, then scored.

``evaluate router``'s ``fast_tier`` section (``fast_tier_report``); the replayed evaluations ask ``auto:fast``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from evaluation.datasets import cached_embeddings
from evaluation.routing_metrics import classification_metrics, method_report
from routing.ml.charview import add_typos
from routing.ml.training import TrainConfig


def fast_tier_report(split: Any, model_name: str, seed: int, say: Callable[[str], Any], full: dict[str, Any], texts_timed: list[str],
                     documents: list[str] | None = None, name: str = "", *, model_kwargs: dict[str, Any], typo_rate: float) -> dict[str, Any]:
    """The fast tier as router training makes it (``train_fast_tier``), scored on the same test questions as the full router.

    ``split`` is ``evaluation.router.Split`` (train, val, test and out-of-scope rows); ``full`` the
    full router's report.

    Reports ``method_report``'s figures, what it gives up (``accuracy_cost``, ``macro_f1_cost``), its
    encoder's cosine with the full one, the distillation and its latency (``route_p50_ms``).
    ``documents`` (``--knowledge``): their sentences join the distillation, as in router training.
    """
    from encoders import resolve_model_path
    from routing.ml.textrouter import fast_tier_from_model

    n = len(split.classes)
    x_train, y_train = split.xy("train")
    x_val, y_val = split.xy("val")
    say(f"training the fast tier on {len(y_train)} queries")
    t = time.perf_counter()
    try:  # the documents' sentences embedded by the dataset's cache
        tier, trained = fast_tier_from_model(
            resolve_model_path(model_name), split.texts("train"), x_train, y_train, split.texts("val"), x_val, y_val, n, documents or [],
            lambda texts: cached_embeddings(f"{name}-fast-tier-document-sentences", texts, model_name, say), model_kwargs, TrainConfig(seed=seed))
    except ValueError as exc:  # as router training does: no tier, and why
        return {"trained": False, "reason": str(exc)}
    train_s = time.perf_counter() - t

    def scores(part: tuple[np.ndarray, list[str]]) -> tuple[np.ndarray, np.ndarray]:
        _, texts = part
        if not texts:
            return np.zeros((0, n)), np.zeros(0)
        return tier.router.scores(tier.encoder.encode(texts), texts)

    x_test, texts_test = split.part("test")
    report = method_report(split.y[split.idx["test"]], scores((x_test, texts_test)), scores(split.part("oos")), n, trained["abstain_threshold"],
                           scores(split.part("unseen")) if split.unseen_test else None)
    encode_ms, route_ms = [], []
    for text in texts_timed:
        t0 = time.perf_counter()
        vector = tier.encoder.encode([text])[0]
        t1 = time.perf_counter()
        tier.router.score_one(vector, text)
        encode_ms.append((t1 - t0) * 1000)
        route_ms.append((time.perf_counter() - t0) * 1000)
    cosine = (tier.encoder.encode(texts_test) * x_test).sum(axis=1) if texts_test else np.zeros(0)
    # typo10 as ``evaluation.router.typo_report`` draws it (the same seed, the same typos).
    rng = np.random.default_rng(seed)
    typo_texts = [add_typos(t, typo_rate, rng) for t in texts_test]
    typo = classification_metrics(split.y[split.idx["test"]], scores((x_test, typo_texts))[0].argmax(axis=1), n) if typo_texts else None
    report.update({
        "trained": True,
        "train_s": round(train_s, 1),
        "accuracy_cost": round(full["accuracy"] - report["accuracy"], 4),
        "macro_f1_cost": round(full["macro_f1"] - report["macro_f1"], 4),
        "embed_p50_ms": float(np.median(encode_ms)) if encode_ms else None,
        "route_p50_ms": float(np.median(route_ms)) if route_ms else None,
        "cosine_with_full_encoder": {"mean": float(cosine.mean()), "p10": float(np.quantile(cosine, 0.1))} if len(cosine) else None,
        "distil": trained["distil"],
        "val_accuracy": trained["val"]["accuracy"],
        "typo10": None if typo is None else {"accuracy": typo["accuracy"], "macro_f1": typo["macro_f1"],
                                             "accuracy_loss": report["accuracy"] - typo["accuracy"]},
    })
    return report
