"""Evaluating the learned router against logistic regression and nearest-example routing.

``evaluate_router`` embeds a dataset once, trains every method on ``train`` (``val``, or a seeded 10%
of ``train``, for every choice) and scores it on ``test`` plus the out-of-scope rows; test rows whose
label never occurs in training are reported apart (``unseen_labels``). Methods: ``router`` (the
product's ``train_text_router`` with its defaults), ``logreg``, ``knn`` and their ``_typos`` variants
(``evaluation.baselines``); ``--ablate`` retrains without each mechanism (``evaluation.ablation``).
``route_p50_ms`` is measured one query at a time through the bare encoder as served (an encoder child
process), ``embed_p50_ms`` the encoder's alone. With ``knowledge`` it also scores knowledge-aware
routing (``evaluation.knowledge_routing``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.baselines import fit_baselines
from evaluation.datasets import (
    cached_embeddings,
    carve_validation,
    dataset_embeddings,
    read_jsonl,
    split_names,
    typo_copy_encoder,
    user_turns,
    validation_note,
)
from evaluation.fast_tier import fast_tier_report
from evaluation.latency import Served, measure_latency
from evaluation.routing_metrics import classification_metrics, method_report, part_scores, routing_targets
from routing.ml.arbiter import Arbiter, LoadWindow
from routing.ml.charview import add_typos
from routing.ml.textrouter import Embed, train_text_router, typo_augment
from routing.ml.training import Context, TrainConfig, inject_label_noise, train_router

LATENCY_QUERIES = 200
BASELINES = ("logreg", "logreg_typos", "knn", "knn_typos")
NOISE_LEVELS = (0.0, 0.1, 0.2)
TYPO_RATE = 0.1
TARGET_RECALL = 0.95
VAL_SHARE = 0.1
WARMUP_TEXTS = 5
# The noise report compares the router as trained (with TrainConfig's default noise injection on
# the embeddings) against the same router with every noise-injection regulariser off.
WITHOUT_REGULARISER = {"input_noise": 0.0, "label_noise": 0.0, "gumbel_temperature": 0.0, "typo_rate": 0.0, "char_view": False}
VARIANTS = {"conv": {"use_conv": True}, "no_conv": {"use_conv": False}}
# The product's variant (routing.ml.training.DEFAULT_MODEL_KWARGS), chosen on val accuracy there.
DEFAULT_VARIANT = "no_conv"

Say = Callable[[str], None]


# --- data ----------------------------------------------------------------------------------------

def row_label(row: dict[str, Any], label: str) -> str | None:
    """The row's gold label, or None for out-of-scope rows (null label or intent ``oos``)."""
    value = row.get(label)
    if value is None or row.get("intent") == "oos" or value == "oos":
        return None
    return str(value)


class Split:
    """Embeddings and label indices of one dataset, split for training and testing.

    ``idx`` holds ``train``, ``val`` (the dataset's, or a seeded stratified 10% carved from train:
    ``validation`` says which), ``test`` (test rows whose label the router was trained on),
    ``unseen`` (test rows whose label never occurs in training: no expert exists for them, so they
    are out of scope, scored apart as abstentions, never as misroutes) and ``oos`` (out-of-scope rows).
    """

    def __init__(self, rows: list[dict[str, Any]], x: np.ndarray, label: str, seed: int = 0, train_per_label: int | None = None):
        labels = [row_label(r, label) for r in rows]
        splits = split_names(rows)
        has = np.array([lab is not None for lab in labels])
        train = (splits == "train") & has
        val = (splits == "val") & has
        carved = not val.any()
        if carved:
            # No validation split: hold out a stratified 10% of train for early stopping and calibration.
            val = carve_validation(labels, train, VAL_SHARE, seed)
            train &= ~val
        self.validation = validation_note(carved, VAL_SHARE, seed)
        self.small_data: dict[str, Any] | None = None
        if train_per_label:
            # A small team's data: at most N training questions per label and the validation share the
            # product keeps of them (routing.services: 15% of the labelled questions), seeded.
            val_per_label = max(3, round(train_per_label * 0.15 / 0.85))
            train = _at_most_per_label(train, labels, train_per_label, seed)
            val = _at_most_per_label(val, labels, val_per_label, seed + 1)
            self.small_data = {"train_per_label": train_per_label, "val_per_label": val_per_label, "seed": seed}
        self.classes: list[str] = sorted({labels[i] for i in np.nonzero(train)[0]})  # type: ignore[type-var]
        if len(self.classes) < 2:
            present = sorted({str(s) for s in splits if s}) or ["none"]
            raise ValueError(f"the training split has {len(self.classes)} distinct {label} label(s); routing needs at least two "
                             f"(queries.jsonl's splits: {', '.join(present)}; the evaluations read 'train', 'val' and 'test' from each row's split)")
        index = {c: i for i, c in enumerate(self.classes)}
        self.y = np.array([index.get(lab, -1) if lab is not None else -2 for lab in labels])
        test = (splits == "test") & has
        self.unseen_test = int((test & (self.y == -1)).sum())  # test labels never seen in training
        self.unseen_labels = sorted({labels[i] for i in np.nonzero(test & (self.y == -1))[0]})  # type: ignore[type-var]
        self.idx = {
            "train": np.nonzero(train)[0],
            "val": np.nonzero(val & (self.y >= 0))[0],
            "test": np.nonzero(test & (self.y >= 0))[0],
            "oos": np.nonzero(~has & np.isin(splits, ["test", "oos"]))[0],
            "unseen": np.nonzero(test & (self.y == -1))[0],
        }
        self.rows, self.x, self.label = rows, x, label

    def xy(self, part: str) -> tuple[np.ndarray, np.ndarray]:
        return self.x[self.idx[part]], self.y[self.idx[part]]

    def texts(self, part: str) -> list[str]:
        return [str(self.rows[i].get("text") or "") for i in self.idx[part]]

    def part(self, name: str) -> tuple[np.ndarray, list[str]]:
        """Embeddings and texts of one part: what every method scores."""
        return self.x[self.idx[name]], self.texts(name)


def _at_most_per_label(mask: np.ndarray, labels: list[str | None], n: int, seed: int) -> np.ndarray:
    """``mask`` keeping at most ``n`` seeded rows of each label."""
    rng = np.random.default_rng(seed)
    out = np.zeros_like(mask)
    by_label: dict[str, list[int]] = {}
    for i in np.nonzero(mask)[0]:
        by_label.setdefault(str(labels[i]), []).append(int(i))
    for members in by_label.values():
        out[rng.permutation(members)[:n]] = True
    return out


# --- methods ---------------------------------------------------------------------------------------

class RouterMethod:
    """The router trained and calibrated as the service trains it (``train_text_router``: typo copies, character view, blend)."""

    def __init__(self, model_kwargs: dict[str, Any], config: TrainConfig):
        self.model_kwargs, self.config = model_kwargs, config

    def fit(self, x: np.ndarray, y: np.ndarray, x_val: np.ndarray, y_val: np.ndarray, n: int,
            texts: list[str], texts_val: list[str], embed: Embed) -> RouterMethod:
        self.result_ = train_text_router(texts, x, y, texts_val, x_val, y_val, n, embed, self.model_kwargs, self.config)
        self.router_ = self.result_.router
        self.model_ = self.result_.model
        return self

    def scores(self, x: np.ndarray, texts: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.router_.scores(x, texts or [])

    def serve_one(self, vector: np.ndarray, text: str, arbiter: Arbiter, experts: list[str], char_logits: np.ndarray | None = None) -> str:
        """What ``serving.route.route`` does after encoding: score one question (numpy paths), then arbitrate.

        ``char_logits``: the words' reading (``TextRouter.read_text``) made while the encoder worked.
        """
        probs, score = self.router_.score_one(vector, text, char_logits=char_logits)
        return arbiter.decide(dict(zip(experts, probs.tolist(), strict=True)), top_k=2, score=score).chosen[0]

    def served(self, arbiter: Arbiter, experts: list[str]) -> Served:
        """``serve_one`` as ``measure_latency`` times it: the words read while the encoder works."""
        return Served(lambda v, t, words: self.serve_one(v, t, arbiter, experts, words), self.router_.read_text)


def simulate_arbiter(method: RouterMethod, x: np.ndarray, texts: list[str], y: np.ndarray, n: int, seed: int) -> dict[str, Any]:
    """Route the shuffled test stream through the serving arbiter (λ default, window 500, no capacity limit)."""
    probs, scores = method.scores(x, texts)
    order = np.random.default_rng(seed).permutation(len(x))
    experts = [str(i) for i in range(n)]
    arbiter = Arbiter(window=LoadWindow(500), abstain_threshold=None)
    pred = np.empty(len(x), dtype=np.int64)
    for i in order:
        pred[i] = int(arbiter.decide(dict(zip(experts, probs[i].tolist(), strict=True)), top_k=1, score=float(scores[i])).chosen[0])
    report = classification_metrics(y, pred, n)
    report["changed_by_arbiter"] = int((pred != probs.argmax(axis=1)).sum())
    return report


# --- the evaluation ------------------------------------------------------------------------------

def _fit_all(split: Split, noise: float, seed: int, say: Say, routers: dict[str, tuple[dict[str, Any], TrainConfig]], embed: Embed) -> dict[str, Any]:
    """Fit the baselines at full strength and each named router configuration on (optionally noisy) train/val labels.

    ``embed`` is the encoder the router embeds its typo copies with (cached by text); the baselines'
    ``_typos`` fits read the same copies (``typo_augment`` with the router's seed).
    """
    n = len(split.classes)
    x_train, y_train, x_val, y_val = _noisy_train_val(split, noise, seed)
    aug = typo_augment(split.texts("train"), x_train, y_train, split.texts("val"), x_val, y_val, embed, TrainConfig(seed=seed))
    say(f"fitting logistic regression and nearest examples (C, k on validation), without and with the {aug.copies} typo copies")
    fitted: dict[str, Any] = fit_baselines(x_train, y_train, x_val, y_val, n, (aug.x_train, aug.y_train) if aug.copies else None, seed)
    thresholds = {name: float(np.quantile(method.scores(x_val)[1], 1 - TARGET_RECALL, method="lower")) for name, (method, _) in fitted.items()}
    for name, (kwargs, config) in routers.items():
        say(f"training the router ({name}) on {len(y_train)} queries, {n} experts")
        t = time.perf_counter()
        method = RouterMethod(kwargs, config).fit(x_train, y_train, x_val, y_val, n, split.texts("train"), split.texts("val"), embed)
        fitted[name] = (method, time.perf_counter() - t)
        thresholds[name] = method.result_.metrics["abstain_threshold"]
    return {"fitted": fitted, "thresholds": thresholds}


Part = tuple[np.ndarray, list[str]]  # embeddings and texts of the questions a method scores


def _score_all(split: Split, fits: dict[str, Any], test: Part, oos: Part, unseen: Part | None = None) -> dict[str, Any]:
    n = len(split.classes)
    y_test = split.y[split.idx["test"]]
    out = {}
    for name, (method, train_s) in fits["fitted"].items():
        unseen_out = part_scores(method, unseen, n) if unseen is not None else None
        report = method_report(y_test, part_scores(method, test, n), part_scores(method, oos, n), n, fits["thresholds"][name], unseen_out)
        report["train_s"] = float(train_s)
        out[name] = report
    return out


def evaluate_router(dataset: Path, label: str = "domain", noise: float = 0.0, say: Say = print, noise_report: bool = False, seed: int = 0,
                    train_per_label: int | None = None, knowledge: Path | None = None, foreign_oos: Path | None = None,
                    variants: bool = False, quality_only: bool = False, ablation: bool = False) -> dict[str, Any]:
    """Train and score the product's router and the full-strength baselines on one dataset.

    Args:
        dataset: folder holding ``queries.jsonl``.
        label: ``domain`` or ``intent``: the field the experts are.
        noise: share of training (and validation) labels flipped to another class before training.
        say: progress output.
        noise_report: also run the label-noise and typo robustness study (slower).
        seed: seed for label flips, typos, the latency sample and training.
        train_per_label: at most this many training questions per label (and a proportionate
            validation split): a small team's data. None: all.
        knowledge: a folder whose ``docs.jsonl`` holds each domain's documents: also score the
            router with them as evidence (``router_knowledge``, ``evaluation.knowledge_routing``).
        foreign_oos: a ``queries.jsonl`` of another dataset whose out-of-scope rows (null label or
            intent ``oos``) join this one's as out-of-scope questions (for a dataset without any).
        variants: also train the fingerprint with the convolution (``fingerprint_variants``).
        quality_only: skip latency, the fast tier and the conversation-context router (the quality figures alone).
        ablation: also train the router without each mechanism (``evaluation.ablation``), on validation.

    Returns:
        ``router``, ``logreg``, ``knn``, ``logreg_typos`` and ``knn_typos`` reports, ``comparison``,
        ``targets``, the arbiter simulation and diagnostics, and the studies asked for.
    """
    from django.conf import settings

    from routing.ml.diagnostics import diagnose
    from routing.ml.training import predict_logits

    dataset = Path(dataset)
    model_name = settings.EMBEDDING_MODEL
    rows, x = dataset_embeddings(dataset, model_name, say)
    if foreign_oos is not None:
        rows, x = with_foreign_oos(rows, x, Path(foreign_oos), model_name, say)
    split = Split(rows, x, label, seed, train_per_label)
    n = len(split.classes)
    say(f"{dataset.name}: {n} {label} classes; train {len(split.idx['train'])}, val {len(split.idx['val'])}, "
        f"test {len(split.idx['test'])}, out-of-scope {len(split.idx['oos'])}")
    if knowledge is not None and label != "domain":
        raise ValueError("--knowledge routes between domains: documents belong to a domain, not to an intent (use --label domain)")
    config = TrainConfig(seed=seed)
    embed = typo_copy_encoder(dataset.name, model_name, say)
    trained = VARIANTS if variants else {DEFAULT_VARIANT: VARIANTS[DEFAULT_VARIANT]}
    fits = _fit_all(split, noise, seed, say, {name: (kwargs, config) for name, kwargs in trained.items()}, embed)
    x_test, texts_test = split.part("test")
    y_test = split.y[split.idx["test"]]
    reports = _score_all(split, fits, split.part("test"), split.part("oos"), split.part("unseen"))
    typo10 = typo_report(split, fits, dataset.name, model_name, say, seed, reports)
    router_method = fits["fitted"][DEFAULT_VARIANT][0]
    with_knowledge, knowledge_report, latency = None, None, None
    if knowledge is not None:
        from evaluation.knowledge_routing import KnowledgeRouting

        with_knowledge = KnowledgeRouting(split, router_method.router_, Path(knowledge), say, TARGET_RECALL, seed,
                                          router_threshold=fits["thresholds"][DEFAULT_VARIANT])
    try:
        if not quality_only:
            latency = _latency(split, fits, trained, with_knowledge, model_name, seed, say)
            for name in latency["methods"]:
                if name in reports:
                    reports[name].update(latency[name])
        if with_knowledge is not None:
            knowledge_report = with_knowledge.report(split, latency["router_knowledge"] if latency else {})
            knowledge_report["documents_only"] = with_knowledge.documents_only(split)
    finally:
        if with_knowledge is not None:
            with_knowledge.close()

    x_val = split.xy("val")[0]
    router = dict(reports[DEFAULT_VARIANT])
    metrics = router_method.result_.metrics
    router.update({
        "variant": DEFAULT_VARIANT,
        "head": metrics.get("head"),
        "calibration": {k: metrics.get(k) for k in ("prototype_weight", "temperature", "abstain_threshold", "abstain_score", "in_scope", "nearest", "char_view", "typos")},
        "epochs_run": metrics["epochs_run"],
        "arbiter": simulate_arbiter(router_method, x_test, texts_test, y_test, n, seed),
        "val_diagnostics": _compact(diagnose(predict_logits(router_method.model_, x_val), _noisy_train_val(split, noise, seed)[3], n, split.classes)),
        "mlp_only": _mlp_only(router_method, x_test, y_test, n),
    })
    report: dict[str, Any] = {
        "dataset": dataset.name,
        "label": label,
        "pipeline": "product",
        "setup": ("router: routing.ml.textrouter.train_text_router with the product's defaults (TrainConfig, DEFAULT_MODEL_KWARGS), the function "
                  "routing.services.train_router_from_labels calls, on the dataset's train and val rows (not a workspace load); baselines on "
                  "the same embeddings, each choice on validation; router without documents against baselines without"),
        "noise": noise,
        "classes": n,
        "sizes": {k: len(v) for k, v in split.idx.items()},
        "unseen_test_labels": split.unseen_test,
        "unseen_labels": {
            "n": split.unseen_test, "labels": split.unseen_labels,
            "scored_as": "out of scope: apart from accuracy (no expert exists for them); abstention recall at each method's threshold and AUROC against in-scope test questions",
            **{m: {k: r.get(k) for k in ("unseen_abstention_recall", "unseen_auroc")} for m, r in (("router", router), ("logreg", reports["logreg"]), ("knn", reports["knn"]))},
        } if split.unseen_test else {"n": 0},
        "validation": split.validation,
        "small_data": split.small_data,
        "test_label_cv": float(np.bincount(y_test[y_test >= 0], minlength=n).std() / max(1e-9, np.bincount(y_test[y_test >= 0], minlength=n).mean())),
        "router": router,
        **{name: reports[name] for name in BASELINES if name in reports},
        "comparison": _comparison(fits, reports),
        "typo10": typo10,
    }
    say("macro-F1 val / test: " + "; ".join(f"{k} {v['val_macro_f1']:.4f} / {v['test_macro_f1']:.4f}"
                                           for k, v in report["comparison"].items() if isinstance(v, dict)))
    if latency is not None:
        report["embed_p50_ms"] = latency["embed_p50_ms"]
        report["latency"] = {k: latency[k] for k in ("queries", "threads", "warmup", "encoder", "request")}
        report["latency"]["how"] = ("per query and method, at the serving thread count: a bare encoder call (embed_p50_ms), then a request as served "
                                    "(the question sent to the encoder, no micro-batching wait and no vector cache, the method reading its words "
                                    "meanwhile, then the method on the vector: route_p50_ms is its wall time); warm-up texts from train, outside the timed sample")
    if variants:
        report["fingerprint_variants"] = _variants(fits, reports)
    if knowledge_report is not None:
        report["router_knowledge"] = knowledge_report
    if not quality_only:
        documents = [u.get("text") or "" for u in read_jsonl(Path(knowledge) / "docs.jsonl")] if knowledge is not None else None
        report["fast_tier"] = fast_tier_report(split, model_name, seed, say, router, latency["texts"], documents, dataset.name,  # type: ignore[index]
                                               model_kwargs=VARIANTS[DEFAULT_VARIANT], typo_rate=TYPO_RATE)
    report["targets"] = routing_targets(report)
    if not quality_only:
        context = conversation_context(rows, dataset.name, model_name, say)
        if context is not None:
            report["context"] = evaluate_context(split, context, seed, say)
    if noise_report:
        report["noise_report"] = run_noise_report(split, dataset.name, model_name, say, seed)
    if ablation:
        from evaluation.ablation import ablate

        combiner = with_knowledge.combiner.report if with_knowledge is not None else None
        report["ablation"] = ablate(split, metrics, VARIANTS[DEFAULT_VARIANT], embed, seed, say,
                                    {"val_accuracy_router": combiner.get("val_accuracy_router"), "val_accuracy_with_documents_cv": combiner.get("val_accuracy_cv")}
                                    if combiner else None)
    return report


def _latency(split: Split, fits: dict[str, Any], trained: dict[str, Any], with_knowledge: Any, model_name: str, seed: int, say: Say) -> dict[str, Any]:
    """Latency: ~200 test queries, one at a time, with the serving thread count, through the bare encoder; the
    warm-up texts come from train, so none of the timed texts was seen before."""
    from django.conf import settings

    rows, n = split.rows, len(split.classes)
    rng = np.random.default_rng(seed)
    sample = rng.choice(split.idx["test"], size=min(LATENCY_QUERIES, len(split.idx["test"])), replace=False)
    texts = [str(rows[i]["text"]) for i in sample]
    timed = set(texts)
    warmup = [t for t in (str(rows[i]["text"]) for i in rng.permutation(split.idx["train"])[: 4 * WARMUP_TEXTS]) if t not in timed][:WARMUP_TEXTS]
    experts = [str(i) for i in range(n)]
    methods: dict[str, Callable[[np.ndarray, str], Any] | Served] = {
        "logreg": lambda v, t: fits["fitted"]["logreg"][0].scores(v[None, :]),
        "knn": lambda v, t: fits["fitted"]["knn"][0].scores(v[None, :]),
    }
    for name in trained:
        methods[name] = fits["fitted"][name][0].served(Arbiter(window=LoadWindow(500)), experts)
    if with_knowledge is not None:
        methods["router_knowledge"] = with_knowledge.served(experts)
    say(f"measuring latency on {len(texts)} queries, one at a time")
    latency = measure_latency(texts, methods, model_name, threads=settings.TORCH_THREADS or 1, warmup=warmup)
    return {**latency, "methods": list(methods), "texts": texts}


def _comparison(fits: dict[str, Any], reports: dict[str, Any]) -> dict[str, Any]:
    """Validation and test macro-F1 and accuracy of the router and each baseline, with each baseline's validation choice."""
    out: dict[str, Any] = {}
    router = fits["fitted"][DEFAULT_VARIANT][0].result_.metrics
    out["router"] = {"val_macro_f1": router["val"]["macro_f1"], "val_accuracy": router["val"]["accuracy"],
                     "test_macro_f1": reports[DEFAULT_VARIANT]["macro_f1"], "test_accuracy": reports[DEFAULT_VARIANT]["accuracy"],
                     "head": (router.get("head") or {}).get("chosen")}
    for name in BASELINES:
        if name not in fits["fitted"]:
            continue
        choice = fits["fitted"][name][0].choice_
        out[name] = {"val_macro_f1": choice["val_macro_f1"], "val_accuracy": choice["val_accuracy"],
                     "test_macro_f1": reports[name]["macro_f1"], "test_accuracy": reports[name]["accuracy"],
                     "chosen": {k: choice[k] for k in ("C", "k", "kind") if k in choice}}
    best = max((n for n in BASELINES if n in out), key=lambda n: out[n]["val_macro_f1"])
    out["best_baseline_on_val"] = best
    return out


def _variants(fits: dict[str, Any], reports: dict[str, Any]) -> dict[str, Any]:
    """The fingerprint with and without the convolution; which is better is read on validation, never on test."""
    keys = ("accuracy", "macro_f1", "oos_auroc", "train_s", "route_p50_ms", "method_p50_ms")
    variants = {name: {k: reports[name].get(k) for k in keys} for name in VARIANTS}
    for name in VARIANTS:
        variants[name]["val_accuracy"] = fits["fitted"][name][0].result_.metrics["val"]["accuracy"]
    better = max(VARIANTS, key=lambda v: (round(variants[v]["val_accuracy"], 3), -(variants[v]["method_p50_ms"] or 0.0)))
    return {**variants, "better": better, "better_chosen_on": "val accuracy"}


CONTEXT_TURNS = 5


def with_foreign_oos(rows: list[dict[str, Any]], x: np.ndarray, path: Path, model_name: str, say: Say) -> tuple[list[dict[str, Any]], np.ndarray]:
    """``rows`` and ``x`` followed by the out-of-scope rows of another dataset's ``path`` (as split "oos", embedded and cached)."""
    from evaluation.datasets import read_queries

    foreign = [{"text": r["text"], "domain": None, "intent": "oos", "split": "oos", "foreign": True}
               for r in read_queries(path) if r.get("intent") == "oos" or r.get("domain") is None]
    if not foreign:
        raise ValueError(f"{path} holds no out-of-scope rows (null domain or intent 'oos')")
    vectors = cached_embeddings(f"{(path if path.is_dir() else path.parent).name}-foreign-oos", [r["text"] for r in foreign], model_name, say)
    say(f"  + {len(foreign)} out-of-scope questions from {path}")
    return rows + foreign, np.vstack([x, vectors])


def conversation_context(rows: list[dict[str, Any]], name: str, model_name: str, say: Say) -> Context | None:
    """The embedded earlier *user* turns of each row (field ``context``: texts or ``{speaker, text}``), or None without any.

    Agent turns are left out: the product keeps the user's questions only (``datasets.user_turns``).
    """
    turns_per_row = [user_turns(row, CONTEXT_TURNS) for row in rows]
    if not any(turns_per_row):
        return None
    unique = sorted({t for turns in turns_per_row for t in turns})
    vectors = cached_embeddings(f"{name}-context", unique, model_name, say)
    position = {t: i for i, t in enumerate(unique)}
    out = np.zeros((len(rows), CONTEXT_TURNS, vectors.shape[1]), dtype=np.float32)
    lengths = np.zeros(len(rows), dtype=np.int64)
    for i, turns in enumerate(turns_per_row):
        for j, text in enumerate(turns):
            out[i, j] = vectors[position[text]]
        lengths[i] = len(turns)
    return Context(out, lengths)


def evaluate_context(split: Split, context: Context, seed: int, say: Say) -> dict[str, Any]:
    """The router with the conversation-context path (GRU over earlier turns) against the same router without."""
    from routing.ml.training import predict_proba

    def part(name: str) -> Context:
        return Context(context.turns[split.idx[name]], context.lengths[split.idx[name]])

    n = len(split.classes)
    (x_train, y_train), (x_val, y_val) = split.xy("train"), split.xy("val")
    say(f"training the router with conversation context on {len(y_train)} queries")
    t = time.perf_counter()
    result = train_router(x_train, y_train, x_val, y_val, n, {**VARIANTS[DEFAULT_VARIANT], "context_dim": 64}, TrainConfig(seed=seed),
                          context_train=part("train"), context_val=part("val"))
    train_s = time.perf_counter() - t
    x_test, y_test = split.xy("test")
    with_history = predict_proba(result.model, x_test, part("test")).argmax(axis=1)
    without = predict_proba(result.model, x_test).argmax(axis=1)
    keep = ("accuracy", "macro_f1")
    return {
        "turns": CONTEXT_TURNS,
        "test_rows_with_history": int((context.lengths[split.idx["test"]] > 0).sum()),
        "router_context": {**{k: v for k, v in classification_metrics(y_test, with_history, n).items() if k in keep}, "train_s": train_s},
        "router_context_without_history": {k: v for k, v in classification_metrics(y_test, without, n).items() if k in keep},
    }


def _mlp_only(method: RouterMethod, x: np.ndarray, y: np.ndarray, n: int) -> dict[str, float]:
    """The router without its prototype memory: what the gating MLP alone gets right."""
    import torch

    with torch.no_grad():
        logits = method.model_.mlp_logits(torch.as_tensor(x, dtype=torch.float32)).numpy()
    return {k: v for k, v in classification_metrics(y, logits.argmax(axis=1), n).items() if k in ("accuracy", "macro_f1")}


def _compact(diagnostics: dict[str, Any]) -> dict[str, Any]:
    """Diagnostics without the bulky per-class tables (kept in TrainingRun.metrics by the service)."""
    keep = ("n", "accuracy", "macro_f1", "load_cv", "temperature", "nll", "nll_calibrated", "ece", "ece_calibrated", "undecided")
    return {k: diagnostics[k] for k in keep}


def run_noise_report(split: Split, name: str, model_name: str, say: Say, seed: int = 0) -> dict[str, Any]:
    """Label noise (0/10/20% of training labels flipped) x regulariser on/off, on clean and typo-perturbed test queries."""
    rng = np.random.default_rng(seed)
    test_oos = np.r_[split.idx["test"], split.idx["oos"]]
    typo_texts = [add_typos(str(split.rows[i]["text"]), TYPO_RATE, rng) for i in test_oos]
    x_typo = cached_embeddings(f"{name}-typos{int(TYPO_RATE * 100)}-seed{seed}", typo_texts, model_name, say)
    n_test = len(split.idx["test"])
    test_typo, oos_typo = (x_typo[:n_test], typo_texts[:n_test]), (x_typo[n_test:], typo_texts[n_test:])
    embed = typo_copy_encoder(name, model_name, say)
    levels = {}
    for level in NOISE_LEVELS:
        say(f"noise report: {int(level * 100)}% of training labels flipped")
        kwargs = dict(VARIANTS[DEFAULT_VARIANT])
        fits = _fit_all(split, level, seed, say, {
            "router": (kwargs, TrainConfig(seed=seed)), "router_without_regulariser": (kwargs, TrainConfig(seed=seed, **WITHOUT_REGULARISER)),
        }, embed)
        clean = _score_all(split, fits, split.part("test"), split.part("oos"))
        typo = _score_all(split, fits, test_typo, oos_typo)
        levels[str(level)] = {
            method: {
                "accuracy": clean[method]["accuracy"], "macro_f1": clean[method]["macro_f1"], "oos_auroc": clean[method]["oos_auroc"],
                "typo_accuracy": typo[method]["accuracy"], "typo_macro_f1": typo[method]["macro_f1"], "typo_oos_auroc": typo[method]["oos_auroc"],
            }
            for method in ("router", "router_without_regulariser", "logreg", "knn")
        }
    return {
        "typo_rate": TYPO_RATE, "seed": seed, "regulariser": {"input_noise": TrainConfig().input_noise}, "without_regulariser": WITHOUT_REGULARISER,
        "labels_flipped_in": "train and val", "levels": levels,
    }


def typo_report(split: Split, fits: dict[str, Any], name: str, model_name: str, say: Say, seed: int, clean: dict[str, Any]) -> dict[str, Any]:
    """``typo10``: every method on the test questions with 10% letter typos (seeded), and what the typos cost it.

    The typo'd questions are the noise report's test questions (the same seed draws the same typos).
    """
    rng = np.random.default_rng(seed)
    texts = [add_typos(t, TYPO_RATE, rng) for t in split.texts("test")]
    x = cached_embeddings(f"{name}-typos{int(TYPO_RATE * 100)}-test-seed{seed}", texts, model_name, say)
    typo = _score_all(split, fits, (x, texts), (np.zeros((0, x.shape[1]), dtype=np.float32), []))
    out: dict[str, Any] = {"rate": TYPO_RATE, "seed": seed, "n": len(texts)}
    for method, label in ((DEFAULT_VARIANT, "router"), *((b, b) for b in BASELINES if b in typo)):
        out[label] = {"accuracy": typo[method]["accuracy"], "macro_f1": typo[method]["macro_f1"],
                      "accuracy_loss": clean[method]["accuracy"] - typo[method]["accuracy"]}
    return out


def _noisy_train_val(split: Split, level: float, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n = len(split.classes)
    x_train, y_train = split.xy("train")
    x_val, y_val = split.xy("val")
    if level > 0:
        y_train = inject_label_noise(y_train, level, n, np.random.default_rng(seed + 1000))
        y_val = inject_label_noise(y_val, level, n, np.random.default_rng(seed + 1001))
    return x_train, y_train, x_val, y_val
