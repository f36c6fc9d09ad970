"""The router as serving uses it: the embedding network and the character view, blended.

``train_text_router`` is how the product trains a router (``routing.services`` and ``evaluate router``
both call it): seeded typo copies of the questions, ``RouterNet`` trained on both, ``CharView`` fitted
on the same texts, then on validation only the blend weight (``BLEND_RULE``), its temperature, the
in-scope score (``routing.ml.inscope``) and its threshold; the linear head is fitted the same way and
whichever has the better validation macro-F1 serves (``HEAD_RULE``). Expert probabilities are
``softmax(((1 - w) log p_net + w log p_char) / T)``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from sklearn.metrics import f1_score

from . import fast_encoder
from .charview import CharView, typo_copies
from .diagnostics import fit_temperature, nll, softmax
from .fast_encoder import StaticEncoder, distil
from .inscope import InScope, fit_in_scope
from .knowledge import KnowledgeCombiner
from .nearest import NearestBank
from .router import NumpyScorer, RouterNet
from .training import Context, TrainConfig, TrainResult, abstain_threshold, calibrate, probability_metrics, route_scores, train_router

BLEND_WEIGHTS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
# How ``fit_blend`` chooses the weight: NLL reads every question's probability, not only the top one (picks in docs/EVALUATIONS.md).
BLEND_RULE = "lowest validation NLL as written; within one standard error of it, lowest NLL on the typo copies"
LOG_FLOOR = math.log(1e-12)  # blend_logits' floor on the network's probabilities
# The nearest questions' weight in the logits (``fit_nearest_weight``), from "none" to "they decide" (a cosine gap
# of 0.05 at 40 is a factor of e^2); validation's picks are in docs/EVALUATIONS.md.
NEAREST_WEIGHTS = (0.0, 2.0, 5.0, 10.0, 20.0, 40.0)
NEAREST_RULE = ("highest validation macro-F1 as written (what the router is compared on); among the weights that reach it, lowest validation "
                "NLL as written, and within one standard error of that, the smallest weight within one standard error of the lowest NLL on the typo copies")
# Which network serves (``train_text_router``): the MLP, or the linear head (``routing.ml.linear``) with the same views fitted again.
HEAD_RULE = "higher validation macro-F1 as written, of the served router on the MLP or on the linear head (C on validation); ties: the MLP"
BLEND_FILE = "blend.json"
CHAR_FOLDER = "charview"
FAST_FOLDER = "fast"

Embed = Callable[[list[str]], np.ndarray]


@dataclass
class Scored:
    """One question's blended probabilities and in-scope score, and each view's own probabilities."""

    probs: np.ndarray
    score: float
    meaning: np.ndarray
    spelling: np.ndarray | None
    examples: np.ndarray | None = None  # each expert's nearest-question cosine, where the router weighs them


@dataclass
class TextRouter:
    """``RouterNet`` plus, where it was trained with one, the character view and the blend."""

    model: RouterNet
    char_view: CharView | None = None
    weight: float = 0.0
    temperature: float = 1.0
    in_scope: InScope = field(default_factory=InScope)  # how the in-scope score is made (``routing.ml.inscope``)
    knowledge: KnowledgeCombiner | None = None  # the experts' documents as evidence (fitted by routing.services when they all have some)
    fast: FastTier | None = None  # the fast tier (``auto:fast``): its own encoder and its own router, trained beside this one
    bank: NearestBank | None = None  # training questions (``routing.ml.nearest``): routing and in-scope evidence, where validation chose it
    nearest_weight: float = 0.0  # the nearest questions' per-expert evidence in the logits (``fit_nearest_weight``)
    nearest_temperature: float = 1.0

    def __post_init__(self) -> None:
        self.scorer: NumpyScorer | None = self.model.numpy_scorer()

    @property
    def score_scale(self) -> float:
        """The character view's confidence's weight in the in-scope score."""
        return self.in_scope.char_scale

    @property
    def context_dim(self) -> int:
        return int(self.model.context_dim or 0)

    def scores(self, x: np.ndarray, texts: list[str], context: Context | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Calibrated probabilities (n, N) and in-scope scores (n,) for embeddings ``x`` of ``texts``."""
        probs, score = route_scores(self.model, x, context)
        char = self.char_view.log_proba(texts) if self.char_view is not None and len(texts) else None
        return self.combine(probs, score, char, x)

    def score_one(self, vector: np.ndarray, text: str, char_logits: np.ndarray | None = None) -> tuple[np.ndarray, float]:
        """The same for one question without its conversation: the numpy path where the network has one (serving)."""
        scored = self.explain_one(vector, text, char_logits=char_logits)
        return scored.probs, scored.score

    def read_text(self, text: str) -> np.ndarray | None:
        """What the router reads from the question's words alone: the character view's log-probabilities (None without one).

        It needs no embedding, so serving reads it while the question is being encoded and hands
        it to ``explain_one`` (``char_logits``).
        """
        return self.char_view.log_proba_one(text) if self.char_view is not None else None

    def explain_one(self, vector: np.ndarray, text: str, context: torch.Tensor | None = None, lengths: torch.Tensor | None = None,
                    char_logits: np.ndarray | None = None) -> Scored:
        """``score_one`` with what each view said: the network's (meaning) and the character view's (spelling) probabilities.

        The same figures as ``scores`` on one row, with as few array operations as it takes (one
        question's arithmetic is cheaper than each operation's fixed cost). ``char_logits``: ``read_text(text)``
        when the caller read it already.
        """
        if self.scorer is not None and context is None:
            log_net, score = self.scorer.log_scores(np.asarray(vector, dtype=np.float32))
            meaning = np.exp(log_net)
        else:
            with torch.inference_mode():
                p, s = self.model.route_scores(torch.from_numpy(np.asarray(vector, dtype=np.float32)[None, :]), context, lengths)
            meaning, score = p[0].numpy().astype(np.float64), float(s[0])
            log_net = np.log(np.clip(meaning, 1e-12, None))
        sims = self.bank.similarities(vector) if self.bank is not None else None  # (1, M): one product for both uses
        nearest = float(self.bank.overall(sims)[0]) if sims is not None and self.in_scope.mix else None  # type: ignore[union-attr]
        examples = self.bank.per_expert(sims)[0] if sims is not None and self.nearest_weight else None  # type: ignore[union-attr]
        if self.char_view is None:
            return Scored(self._with_nearest(meaning, examples), self.in_scope.combine_one(score, nearest, None), meaning, None, examples)
        char = char_logits if char_logits is not None else self.char_view.log_proba_one(text)
        # blend_logits and softmax on one row (log_net floored as blend_logits clips the probabilities)
        logits = np.maximum(log_net, LOG_FLOOR)
        logits *= (1.0 - self.weight) / self.temperature
        logits += (self.weight / self.temperature) * char
        logits -= logits.max()
        probs = np.exp(logits)
        probs /= probs.sum()
        return Scored(self._with_nearest(probs, examples), self.in_scope.combine_one(score, nearest, math.exp(float(char.max()))), meaning,
                      np.exp(char), examples)

    def _with_nearest(self, probs: np.ndarray, examples: np.ndarray | None) -> np.ndarray:
        """One question's probabilities with the nearest questions' per-expert evidence, where the router weighs it."""
        if examples is None:
            return probs
        logits = nearest_logits(probs[None, :], examples[None, :], self.nearest_weight)[0] / self.nearest_temperature
        logits -= logits.max()
        out = np.exp(logits)
        return out / out.sum()

    def combine(self, probs: np.ndarray, score: np.ndarray, char_log_proba: np.ndarray | None, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The served probabilities and in-scope scores, from the network's, the character view's (None: none) and the bank's."""
        sims = self.bank.similarities(x) if self.bank is not None else None
        if char_log_proba is not None:
            probs = softmax(blend_logits(probs, char_log_proba, self.weight), self.temperature)
        if self.nearest_weight and sims is not None:
            probs = softmax(nearest_logits(probs, self.bank.per_expert(sims), self.nearest_weight), self.nearest_temperature)  # type: ignore[union-attr]
        nearest = self.bank.overall(sims) if sims is not None and self.in_scope.mix else None  # type: ignore[union-attr]
        confidence = np.exp(char_log_proba).max(axis=1) if char_log_proba is not None else None
        return probs, self.in_scope.combine(score, nearest, confidence)

    def held_out_scores(self, x: np.ndarray, texts: list[str], y: np.ndarray, context: Context | None = None) -> np.ndarray:
        """(n,) each question's in-scope score as if its expert ``y[i]`` did not exist (``InScope.held_out``):
        what evidence added to the score on top (``routing.ml.knowledge``) is weighed on."""
        probs = None if self.model.has_prototypes else route_scores(self.model, x, context)[0]
        char = np.exp(self.char_view.log_proba(texts)) if self.char_view is not None and len(texts) else None
        return self.in_scope.held_out(*_network_evidence(self.model, x, probs), self.bank, x, y, char)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        self.model.save(path)
        if self.knowledge is not None:
            self.knowledge.save(path)
        if self.char_view is not None:
            self.char_view.save(path / CHAR_FOLDER)
            (path / BLEND_FILE).write_text(json.dumps({"weight": self.weight, "temperature": self.temperature, "score_scale": self.score_scale,
                                                       "nearest_mix": self.in_scope.mix, "nearest_weight": self.nearest_weight,
                                                       "nearest_temperature": self.nearest_temperature}))
        if self.bank is not None:
            self.bank.save(path)
        if self.fast is not None:
            self.fast.save(path / FAST_FOLDER)

    @classmethod
    def load(cls, path: str | Path, tokenizer_file: str | Path | None = None, with_fast: bool = True) -> TextRouter:
        """A saved router; one saved before the character view loads as the network alone.

        ``tokenizer_file``: where the full encoder's tokenizer is now, for the fast tier's encoder
        (default: where it was when the tier was trained). ``with_fast=False`` skips the fast tier
        (its ~47 MB table) for callers that score with the full router only.
        """
        path = Path(path)
        model = RouterNet.load(path)
        knowledge = KnowledgeCombiner.load(path)
        fast = None
        if with_fast and FastTier.exists(path / FAST_FOLDER, tokenizer_file):
            fast = FastTier.load(path / FAST_FOLDER, tokenizer_file)
        if not (path / BLEND_FILE).exists():
            return cls(model, knowledge=knowledge, fast=fast)
        blend = json.loads((path / BLEND_FILE).read_text())
        # Routers saved before the bank of training questions have none: their figures are unchanged.
        bank = NearestBank.load(path)
        in_scope = InScope(float(blend.get("nearest_mix") or 0.0) if bank is not None else 0.0, float(blend["score_scale"]))
        return cls(model, CharView.load(path / CHAR_FOLDER), float(blend["weight"]), float(blend["temperature"]), in_scope, knowledge, fast,
                   bank=bank, nearest_weight=float(blend.get("nearest_weight") or 0.0) if bank is not None else 0.0,
                   nearest_temperature=float(blend.get("nearest_temperature") or 1.0))


@dataclass
class FastTier:
    """``auto:fast``'s router: a distilled static encoder (``routing.ml.fast_encoder``) and a ``TextRouter`` trained on its vectors."""

    encoder: StaticEncoder
    router: TextRouter

    def save(self, path: Path) -> None:
        self.encoder.save(path)
        self.router.save(path / "router")

    @staticmethod
    def exists(path: Path, tokenizer_file: str | Path | None = None) -> bool:
        """A saved tier whose tokenizer can be read (else the router loads without it: ``auto:fast`` then uses the full router)."""
        return StaticEncoder.exists(path, tokenizer_file) and (path / "router").is_dir()

    @classmethod
    def load(cls, path: Path, tokenizer_file: str | Path | None = None) -> FastTier:
        return cls(StaticEncoder.load(path, tokenizer_file), TextRouter.load(path / "router"))


def train_fast_tier(
    texts_train: list[str], x_train: np.ndarray, y_train: np.ndarray, texts_val: list[str], x_val: np.ndarray, y_val: np.ndarray,
    n_experts: int, init_table: np.ndarray, tokenizer_file: str | Path, model_kwargs: dict[str, Any] | None = None,
    config: TrainConfig | None = None, extra_texts: list[str] | None = None, extra_x: np.ndarray | None = None,
) -> tuple[FastTier, dict[str, Any]]:
    """The fast tier for the same questions the full router learns from.

    The static encoder is distilled onto the full encoder's vectors of ``x_train`` (plus
    ``extra_texts``/``extra_x``, the documents' sentences), then a router is trained on its vectors as
    the full one is, without a conversation path. Returns the tier and a report (the distillation and
    validation figures).
    """
    config = config or TrainConfig()
    extra_texts = list(extra_texts or [])
    if extra_texts and (extra_x is None or len(extra_x) != len(extra_texts)):
        raise ValueError("each extra text needs its vector")
    distil_texts = list(texts_train) + extra_texts
    distil_x = np.vstack([x_train, extra_x]) if extra_texts else x_train
    encoder, distilled = distil(distil_texts, distil_x, texts_val, x_val, init_table, tokenizer_file, seed=config.seed)
    kwargs = {k: v for k, v in (model_kwargs or {}).items() if k != "context_dim"}
    result = train_text_router(texts_train, encoder.encode(texts_train), y_train, texts_val, encoder.encode(texts_val), y_val, n_experts,
                               encoder.encode, kwargs, config)
    report = {"distil": {**distilled.as_dict(), "questions": len(texts_train), "document_sentences": len(extra_texts)}, "val": result.metrics["val"],
              "abstain_threshold": result.metrics.get("abstain_threshold"), "encoder": "static word pieces distilled from the full encoder"}
    return FastTier(encoder, result.router), report


def fast_tier_from_model(
    model_folder: str | Path, texts_train: list[str], x_train: np.ndarray, y_train: np.ndarray, texts_val: list[str], x_val: np.ndarray,
    y_val: np.ndarray, n_experts: int, documents: list[str], embed: Embed, model_kwargs: dict[str, Any] | None = None,
    config: TrainConfig | None = None,
) -> tuple[FastTier, dict[str, Any]]:
    """``train_fast_tier`` the way router training runs it: the piece table and tokenizer read from the
    full encoder's ``model_folder``, and the sentences of ``documents`` (``fast_encoder.document_sentences``)
    embedded by ``embed`` (the full encoder) as extra distillation text. Raises ValueError when the
    folder cannot be distilled from or the inputs do not fit.
    """
    config = config or TrainConfig()
    table, tokenizer_file = fast_encoder.full_model_parts(model_folder)
    sentences = fast_encoder.document_sentences(documents, seed=config.seed)
    extra = np.asarray(embed(sentences), dtype=np.float32) if sentences else None
    return train_fast_tier(texts_train, x_train, y_train, texts_val, x_val, y_val, n_experts, table, tokenizer_file, model_kwargs, config,
                           extra_texts=sentences, extra_x=extra)


def blend_logits(probs: np.ndarray, char_log_proba: np.ndarray, weight: float) -> np.ndarray:
    return (1.0 - weight) * np.log(np.clip(probs, 1e-12, None)) + weight * char_log_proba


def train_text_router(
    texts_train: list[str], x_train: np.ndarray, y_train: np.ndarray,
    texts_val: list[str], x_val: np.ndarray, y_val: np.ndarray,
    n_experts: int, embed: Embed, model_kwargs: dict[str, Any] | None = None, config: TrainConfig | None = None,
    context_train: Context | None = None, context_val: Context | None = None,
) -> TrainResult:
    """Train the router the product serves (see the module); ``result.router`` is the ``TextRouter``.

    Args:
        texts_train, x_train, y_train: training questions, their embeddings and expert indices.
        texts_val, x_val, y_val: the validation split (early stopping and every fitted choice).
        embed: the sentence encoder, for the typo copies (embeddings (n, D), L2-normalised).
        context_train, context_val: earlier turns, for a router with a context path (a typo copy
            keeps its question's context).
    """
    config = config or TrainConfig()
    clean_train, clean_val = len(texts_train), len(texts_val)
    aug = typo_augment(texts_train, x_train, y_train, texts_val, x_val, y_val, embed, config, context_train, context_val)
    result = train_router(aug.x_train, aug.y_train, aug.x_val, aug.y_val, n_experts, model_kwargs, config,
                          context_train=aug.context_train, context_val=aug.context_val)
    result.metrics["typos"] = {"rate": config.typo_rate, "copies": aug.copies, "embed_s": round(aug.embed_s, 2)}
    view = None
    if config.char_view:
        t = time.perf_counter()
        view = CharView.fit(list(aug.texts_train), np.asarray(aug.y_train), n_experts, seed=config.seed)
        view_s = time.perf_counter() - t
    char = view.log_proba(list(aug.texts_val)) if view is not None else None
    router, blended, served = _serve(result.model, view, char, aug, clean_train, clean_val, n_experts, config)
    head: dict[str, Any] = {"chosen": "mlp", "rule": HEAD_RULE}
    if config.linear_head and not (context_train is not None and result.model.context_dim):
        from .linear import fit_linear, linear_router

        t = time.perf_counter()
        y_val_clean = np.asarray(aug.y_val[:clean_val])
        fitted, linear = fit_linear(aug.x_train, aug.y_train, aug.x_val[:clean_val], y_val_clean, config.linear_cs, config.seed)
        net = linear_router(fitted, n_experts, like=result.model)
        calibration = calibrate(net, aug.x_val, aug.y_val, config.target_recall)
        router_l, blended_l, served_l = _serve(net, view, char, aug, clean_train, clean_val, n_experts, config)
        scores = {name: probability_metrics(b[:clean_val], y_val_clean)["macro_f1"] for name, b in (("mlp", blended), ("linear", blended_l))}
        head.update({"val_macro_f1": scores, "linear": {k: linear[k] for k in ("C", "tried")}, "fit_s": round(time.perf_counter() - t, 2)})
        if scores["linear"] > scores["mlp"]:
            head["chosen"] = "linear"
            head["mlp_calibration"] = {k: result.metrics.get(k) for k in ("prototype_weight", "temperature", "abstain_threshold")}
            result.model, router, blended, served = net, router_l, blended_l, served_l
            result.metrics.update({k: v for k, v in calibration.items() if k != "val_accuracy"})
    elif config.linear_head:
        head["reason"] = "a router with a conversation path keeps its MLP (the linear head reads the question alone)"
    if view is not None:
        served["char_view"].update({"features": len(view.vocabulary), "fit_s": round(view_s, 2)})
    result.metrics.update(served)
    result.metrics["head"] = head
    # "val" is what the console and the variant choice read: the served router on the questions as
    # written; the network's own figure (clean and typo'd questions together) stays as "val_network".
    result.metrics["val_network"] = result.metrics.get("val")
    result.metrics["val"] = probability_metrics(blended[:clean_val], np.asarray(aug.y_val[:clean_val]))
    result.router = router  # type: ignore[attr-defined]
    return result


@dataclass
class Augmented:
    """The training and validation questions followed by their typo copies (``typo_augment``)."""

    texts_train: list[str]
    x_train: np.ndarray
    y_train: np.ndarray
    texts_val: list[str]
    x_val: np.ndarray
    y_val: np.ndarray
    copies: int = 0
    embed_s: float = 0.0
    context_train: Context | None = None
    context_val: Context | None = None


def typo_augment(texts_train: list[str], x_train: np.ndarray, y_train: np.ndarray, texts_val: list[str], x_val: np.ndarray, y_val: np.ndarray,
                 embed: Embed, config: TrainConfig, context_train: Context | None = None, context_val: Context | None = None) -> Augmented:
    """Step 1 of ``train_text_router``: each question followed by a seeded copy with ``config.typo_rate`` letter typos.

    Copies of at most ``typo_copies_max`` questions (a seeded sample, train and val in proportion):
    each copy is one more encoder call in the training job. ``evaluate router`` trains its baselines
    on the same copies.
    """
    if len(texts_train) != len(x_train) or len(texts_val) != len(x_val):
        raise ValueError("each training and validation question needs its text and its embedding")
    if config.typo_rate <= 0:
        return Augmented(list(texts_train), x_train, y_train, list(texts_val), x_val, y_val, context_train=context_train, context_val=context_val)
    started = time.perf_counter()
    share = min(1.0, config.typo_copies_max / max(1, len(texts_train) + len(texts_val))) if config.typo_copies_max else 1.0
    pick_train, pick_val = _sample(len(texts_train), share, config.seed + 3), _sample(len(texts_val), share, config.seed + 4)
    noisy_train = typo_copies([texts_train[i] for i in pick_train], config.typo_rate, config.seed + 1)
    noisy_val = typo_copies([texts_val[i] for i in pick_val], config.typo_rate, config.seed + 2)
    noisy = np.asarray(embed(noisy_train + noisy_val), dtype=np.float32)
    return Augmented(
        list(texts_train) + noisy_train, np.vstack([x_train, noisy[: len(noisy_train)]]), np.concatenate([y_train, y_train[pick_train]]),
        list(texts_val) + noisy_val, np.vstack([x_val, noisy[len(noisy_train):]]), np.concatenate([y_val, y_val[pick_val]]),
        copies=len(noisy_train), embed_s=time.perf_counter() - started,
        context_train=_with_rows(context_train, pick_train), context_val=_with_rows(context_val, pick_val),
    )


def _serve(model: RouterNet, view: CharView | None, char: np.ndarray | None, aug: Augmented, clean_train: int, clean_val: int, n_experts: int,
           config: TrainConfig) -> tuple[TextRouter, np.ndarray, dict[str, Any]]:
    """Steps 3-4 of ``train_text_router`` for one trained network: the served router, its validation probabilities and its metrics."""
    probs, sims = route_scores(model, aug.x_val, aug.context_val)
    if view is None or char is None:
        return TextRouter(model), probs, {}
    y_val = np.asarray(aug.y_val)
    blend = fit_blend(probs, sims, char, y_val, clean_val)
    ratio = blend.pop("char_spread_ratio")
    bank = NearestBank.sample(aug.x_train[:clean_train], np.asarray(aug.y_train[:clean_train]), n_experts, config.nearest_bank_max, config.seed)
    evidence = bank.per_expert(bank.similarities(aug.x_val))
    nearest = fit_nearest_weight(softmax(blend_logits(probs, char, blend["weight"]), blend["temperature"]), evidence, y_val, clean_val,
                                 NEAREST_WEIGHTS if config.nearest_term else (0.0,))
    in_scope = fit_in_scope(*_network_evidence(model, aug.x_val[:clean_val], probs[:clean_val]), aug.x_val[:clean_val], y_val[:clean_val],
                            bank, np.exp(char[:clean_val]), ratio)
    keep = bool(nearest["weight"] or in_scope.mix)
    router = TextRouter(model, view, **blend, in_scope=in_scope, bank=bank if keep else None,
                        nearest_weight=nearest["weight"], nearest_temperature=nearest["temperature"])
    blended, scores = router.combine(probs, sims, char, aug.x_val)
    return router, blended, {
        "abstain_threshold": abstain_threshold(scores, config.target_recall),
        "abstain_score": in_scope.describe("prototype_similarity" if model.has_prototypes else "max_probability"),
        "in_scope": {"nearest_mix": in_scope.mix, "char_scale": in_scope.char_scale, **in_scope.report},
        "nearest": {**nearest, "bank": len(bank), "kept": keep},
        "char_view": {"weight": router.weight, "temperature": router.temperature, "score_scale": router.score_scale,
                      "val_accuracy_clean": _accuracy(blended[:clean_val], y_val[:clean_val]),
                      "val_accuracy_typos": _accuracy(blended[clean_val:], y_val[clean_val:]) if len(y_val) > clean_val else None},
    }


def fit_blend(probs: np.ndarray, sims: np.ndarray, char_log_proba: np.ndarray, y: np.ndarray, clean: int) -> dict[str, float]:
    """Blend weight, temperature and the confidence's spread ratio on validation rows (``clean`` first, then their typo copies).

    The weight (``BLEND_RULE``): each weight's negative log-likelihood per validation question as
    written, at that weight's own fitted temperature; the weights within one standard error (of
    the paired per-question differences) of the best are tied, and among them the lowest NLL on
    the typo copies wins (ties: the smaller weight). The chosen weight's temperature is then
    fitted on both, as is ``char_spread_ratio`` (the network's in-scope score's spread over the
    character view's confidence's: the unit of the confidence's weight in the in-scope score).
    """
    as_written, typos = slice(0, clean), slice(clean, len(y))
    clean_nll, typo_nll = {}, {}
    for weight in BLEND_WEIGHTS:
        logits = blend_logits(probs, char_log_proba, weight)
        clean_nll[weight] = _per_question_nll(logits[as_written], y[as_written])
        typo_nll[weight] = float(_per_question_nll(logits[typos], y[typos]).mean()) if len(y) > clean else 0.0
    best = min(BLEND_WEIGHTS, key=lambda w: (float(clean_nll[w].mean()), w))
    tied = [w for w in BLEND_WEIGHTS if _within_one_se(clean_nll[w] - clean_nll[best])]
    weight = min(tied, key=lambda w: (typo_nll[w], w))
    logits = blend_logits(probs, char_log_proba, weight)
    temperature = fit_temperature(logits, y)
    confidence = np.exp(char_log_proba).max(axis=1)
    spread = float(confidence.std())
    ratio = float(sims.std()) / spread if spread > 1e-9 else 0.0
    if not np.isfinite(nll(logits, y, temperature)):
        temperature = 1.0
    return {"weight": float(weight), "temperature": float(temperature), "char_spread_ratio": ratio}


def fit_nearest_weight(probs: np.ndarray, evidence: np.ndarray, y: np.ndarray, clean: int,
                       weights: tuple[float, ...] = NEAREST_WEIGHTS) -> dict[str, Any]:
    """The nearest questions' weight in the logits, on validation rows (``clean`` first, then their typo copies).

    Served probabilities become ``softmax((log p + b * evidence) / T)`` (``evidence``: each
    expert's ``NearestBank.per_expert``). ``b`` follows ``NEAREST_RULE``: the weights whose routes
    reach the best macro-F1 on the questions as written (the figure the router is compared on with
    its baselines); among them each weight's NLL per question as written at its own fitted
    temperature; the weights within one standard error of the best are tied; among them the typo
    copies' lowest NLL, or the smallest weight within one standard error of it.
    ``T`` is then fitted on both (1 where ``b`` is 0: the router's probabilities as they were).
    """
    as_written, typos = slice(0, clean), slice(clean, len(y))
    clean_nll, typo_nll, macro_f1, tried = {}, {}, {}, []
    for weight in weights:
        logits = nearest_logits(probs, evidence, weight)
        temperature = fit_temperature(logits[as_written], y[as_written])
        clean_nll[weight] = _per_question_nll(logits[as_written] / temperature, y[as_written])
        typo_nll[weight] = _per_question_nll(logits[typos] / temperature, y[typos]) if len(y) > clean else np.zeros(1)
        macro_f1[weight] = round(float(f1_score(y[as_written], logits[as_written].argmax(axis=1), average="macro")), 6)
        tried.append({"weight": weight, "val_nll": round(float(clean_nll[weight].mean()), 5), "val_nll_typos": round(float(typo_nll[weight].mean()), 5),
                      "val_accuracy": round(float((logits[as_written].argmax(axis=1) == y[as_written]).mean()), 4), "val_macro_f1": macro_f1[weight]})
    weights = tuple(w for w in weights if macro_f1[w] == max(macro_f1.values()))  # the measure first, then the NLL rule among its best
    best = min(weights, key=lambda w: (float(clean_nll[w].mean()), w))
    tied = [w for w in weights if _within_one_se(clean_nll[w] - clean_nll[best])]
    # Among those, the typo copies' best, or the smallest weight they cannot tell from it (evidence
    # that helps no one's NLL measurably stays out).
    typo_best = min(tied, key=lambda w: (float(typo_nll[w].mean()), w))
    weight = min(w for w in tied if w == typo_best or _within_one_se(typo_nll[w] - typo_nll[typo_best]))
    temperature = fit_temperature(nearest_logits(probs, evidence, weight), y) if weight else 1.0
    if not np.isfinite(temperature) or temperature <= 0:
        temperature = 1.0
    return {"weight": float(weight), "temperature": float(temperature), "rule": NEAREST_RULE, "tried": tried}


def nearest_logits(probs: np.ndarray, evidence: np.ndarray, weight: float) -> np.ndarray:
    """Log-probabilities (floored) plus ``weight`` x each expert's nearest-question evidence."""
    logits = np.log(np.clip(probs, 1e-12, None))
    return logits + weight * evidence if weight else logits


def _network_evidence(model: RouterNet, x: np.ndarray, probs: np.ndarray | None) -> tuple[np.ndarray, str]:
    """The network's per-expert in-scope evidence for ``x`` and its kind (``routing.ml.inscope``): the
    prototype similarities where the router has prototypes, else its probabilities ``probs``."""
    if model.has_prototypes:
        with torch.no_grad():
            return model.prototype_similarity(torch.as_tensor(x, dtype=torch.float32)).numpy(), "prototypes"
    if probs is None:
        raise ValueError("a router without prototypes reads its probabilities as in-scope evidence: pass them")
    return probs, "probabilities"


def _per_question_nll(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Each row's negative log-likelihood of its label under ``softmax(logits / T)``, T fitted on these rows."""
    if not len(y):
        return np.zeros(0)
    z = logits / fit_temperature(logits, y)
    z = z - z.max(axis=1, keepdims=True)
    return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]


def _within_one_se(differences: np.ndarray) -> bool:
    """A mean paired difference no larger than its standard error (the one-standard-error rule)."""
    if not len(differences):
        return True
    return float(differences.mean()) <= float(differences.std()) / math.sqrt(len(differences)) + 1e-12


def _sample(n: int, share: float, seed: int) -> np.ndarray:
    """Sorted indices of a seeded ``share`` of ``range(n)`` (all of them at share 1)."""
    if share >= 1.0:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).permutation(n)[: max(1, round(share * n))])


def _with_rows(context: Context | None, rows: np.ndarray) -> Context | None:
    """``context`` followed by its ``rows`` again (a typo copy keeps its question's earlier turns)."""
    if context is None:
        return None
    return Context(np.concatenate([context.turns, context.turns[rows]]), np.concatenate([context.lengths, context.lengths[rows]]))


def _accuracy(probs: np.ndarray, y: np.ndarray) -> float | None:
    return float((probs.argmax(axis=1) == y).mean()) if len(y) else None
