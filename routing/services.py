"""Training and activating routers (the offline lifecycle; routing a question is ``serving.route``)."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction

from encoders import embedding_space
from experts.access import is_staff
from experts.selectors import active_experts
from jobs.models import Job
from jobs.services import JobFailed, JobReporter, enqueue_once
from labeling import selectors as labeling_selectors
from labeling.services import embed_missing, encode_texts, load_embeddings

from .ml.diagnostics import diagnose
from .ml.router import RouterNet
from .ml.textrouter import TextRouter, train_text_router
from .ml.training import CONTEXT_TURNS, DEFAULT_MODEL_KWARGS, Context, TrainConfig, TrainingDiverged, predict_logits
from .models import RouterVersion, TrainingRun

logger = logging.getLogger(__name__)


# --- training ------------------------------------------------------------------------------------

def _split(examples: list[Any], val_share: float, seed: int) -> tuple[list[int], list[int]]:
    """Train/validation indices: the source's own split when it has one, else a stratified random one."""
    train = [i for i, e in enumerate(examples) if e.split in ("train", "")]
    val = [i for i, e in enumerate(examples) if e.split == "val"]
    if val and train and all(e.split for e in examples):
        return train, val
    rng = np.random.default_rng(seed)
    train, val = [], []
    by_expert: dict[str, list[int]] = {}
    for i, e in enumerate(examples):
        if e.split != "test":
            by_expert.setdefault(e.expert, []).append(i)
    for idx in by_expert.values():
        idx = list(rng.permutation(idx))
        # At least one query each way when there are two; a lone query stays in training.
        cut = min(max(1, round(len(idx) * val_share)), len(idx) - 1)
        val.extend(idx[:cut])
        train.extend(idx[cut:])
    return train, val


# The retraining gate: questions no router trains or tunes on, so that scheduled retraining compares
# the candidate and the active router on questions neither has seen. A source's own test split when
# it has one; otherwise a fixed ~10% of the labelled queries, chosen by a hash of the query id so
# that every router version holds out the same ones (an expert with fewer than GATE_MIN_PER_EXPERT
# labelled queries gives none: it needs them all to be learned).
GATE_SHARE = 0.10
GATE_MIN_PER_EXPERT = 10


def in_gate(query_id: int, share: float = GATE_SHARE) -> bool:
    """Whether a labelled query belongs to the hashed gate (stable across runs, processes and versions)."""
    digest = hashlib.sha256(f"router-gate:{query_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") < share * 2**32


def gate_split(examples: list[Any]) -> tuple[list[int], str]:
    """Indices of the gate questions among ``examples`` and where they come from (see ``GATE_SHARE``)."""
    test = [i for i, e in enumerate(examples) if e.split == "test"]
    if test:
        return test, "the source's test split"
    counts: dict[str, int] = {}
    for e in examples:
        counts[e.expert] = counts.get(e.expert, 0) + 1
    gate = [i for i, e in enumerate(examples) if counts[e.expert] >= GATE_MIN_PER_EXPERT and in_gate(e.query_id)]
    return gate, f"a hashed {GATE_SHARE:.0%} of the labelled queries"


def _conversation_context(examples: list[Any], x: np.ndarray, max_turns: int = CONTEXT_TURNS) -> Context:
    """Each query's previous queries in its conversation (by query id, oldest first, at most ``max_turns``)."""
    turns = np.zeros((len(examples), max_turns, x.shape[1]), dtype=np.float32)
    lengths = np.zeros(len(examples), dtype=np.int64)
    by_conversation: dict[str, list[int]] = {}
    for i in sorted(range(len(examples)), key=lambda i: examples[i].query_id):
        if examples[i].conversation:
            by_conversation.setdefault(examples[i].conversation, []).append(i)
    for members in by_conversation.values():
        for position, i in enumerate(members):
            previous = members[max(0, position - max_turns) : position]
            turns[i, : len(previous)] = x[previous]
            lengths[i] = len(previous)
    return Context(turns, lengths)


# How a new router version goes live: "always" (the demo, the API's explicit trainings), "if_better"
# (better on held-out gate questions than the active one; scheduled retraining, the console's default),
# "never" (a candidate until a person activates it).
ACTIVATION_POLICIES = ("always", "if_better", "never")


def train_router_from_labels(
    params: dict[str, Any] | None = None, reporter: JobReporter | None = None, job_id: int | None = None, *, activate: str = "always",
) -> RouterVersion:
    """Train a router on the latest promoted clustering run and activate it by the ``activate`` policy.

    If the active router was trained on exactly the same data and parameters, it is kept as is.
    ``activate="if_better"`` (scheduled retraining) activates the new version only when it beats the
    active router's accuracy on the gate, questions that neither router trained or tuned on
    (``gate_split``; every version holds them out, and its accuracy there is ``metrics["gate"]``);
    otherwise it is stored inactive, as a candidate, with the reason in ``metrics["activation"]``.
    With no active router, it activates. ``activate="never"`` stores it as a candidate whatever the
    figures (a person activates it on its run's page).
    A run that cannot train (fewer than two experts, NaN losses, bad parameters) fails with
    ``JobFailed`` and activates nothing. Diagnostics of the validation split (per-expert precision
    and recall, confusion, load, calibration, undecided experts) are stored in the run's metrics.
    """
    if activate not in ACTIVATION_POLICIES:
        raise JobFailed(f"unknown activation policy {activate!r}; one of {', '.join(ACTIVATION_POLICIES)}")
    reporter = reporter or JobReporter()
    params = dict(params or {})
    runs = labeling_selectors.latest_promoted_runs()
    if not runs:
        raise JobFailed("no promoted clustering run: promote proposals to experts first")
    every = labeling_selectors.routing_examples(runs)
    examples = [e for e in every if e.split != "test"]
    experts = sorted({e.expert for e in examples})
    if len(experts) < 2:
        raise JobFailed(f"a router needs at least two experts with queries; found {len(experts)} ({', '.join(experts) or 'none'})")
    without = sorted(set(active_experts().filter(is_fallback=False).values_list("slug", flat=True)) - set(experts))
    if without:
        # Defined behaviour: an expert without labelled queries is left out of the router (it cannot
        # be learned); it stays reachable by its slug and the console lists it here.
        reporter.log(f"experts without labelled queries are not routable: {', '.join(without)}")
    fingerprint = hashlib.sha256(json.dumps([runs[0].pk if len(runs) == 1 else [r.pk for r in runs], [e.query_id for e in examples], experts, params, embedding_space()], sort_keys=True).encode()).hexdigest()
    active = RouterVersion.objects.filter(is_active=True).first()
    if active is not None and active.data_fingerprint == fingerprint:
        reporter.log(f"router v{active.version} was trained on the same data; nothing to do")
        return active
    if activate == "if_better":
        candidate = RouterVersion.objects.filter(data_fingerprint=fingerprint, is_active=False).order_by("-version").first()
        if candidate is not None:
            reporter.log(f"router v{candidate.version} was already trained on the same data and kept as a candidate; nothing to do")
            return candidate
    embed_missing(reporter=None)
    # The gate's questions are held out of training and validation for every version (see gate_split).
    examples = [e for e in every if e.split != "test" or e.expert in experts]
    gate_idx, gate_source = gate_split(examples)
    x = load_embeddings([e.query_id for e in examples], embedding_space())
    y = np.array([experts.index(e.expert) for e in examples])
    held = set(gate_idx)
    pool = [i for i, e in enumerate(examples) if i not in held and e.split != "test"]
    pool_train, pool_val = _split([examples[i] for i in pool], float(params.get("val_share", 0.15)), int(params.get("seed", 0)))
    train_idx, val_idx = [pool[i] for i in pool_train], [pool[i] for i in pool_val]
    missing = sorted(set(experts) - {experts[y[i]] for i in train_idx})
    if missing:
        raise JobFailed(f"experts with no training queries after the validation split: {', '.join(missing)}; label more queries for them")
    reporter.progress(0.1, f"training on {len(train_idx)} queries, validating on {len(val_idx)}")
    config = TrainConfig(**{k: v for k, v in params.items() if k in TrainConfig.__dataclass_fields__})
    model_kwargs = {**DEFAULT_MODEL_KWARGS, **{k: v for k, v in params.items() if k in RouterNet.config_keys and k not in ("input_dim", "n_experts")}}
    context = _conversation_context(examples, x) if int(model_kwargs.get("context_dim", 0) or 0) > 0 else None
    texts = [e.text for e in examples]
    try:
        result = train_text_router(
            [texts[i] for i in train_idx], x[train_idx], y[train_idx], [texts[i] for i in val_idx], x[val_idx], y[val_idx], len(experts),
            encode_texts, model_kwargs, config, context_train=_rows(context, train_idx), context_val=_rows(context, val_idx),
        )
    except TrainingDiverged as exc:
        raise JobFailed(f"training diverged, nothing was activated: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise JobFailed(f"cannot train a router: {exc}") from exc
    reporter.progress(0.8, "weighing the experts' documents as routing evidence")
    _fit_knowledge(result, experts, [texts[i] for i in val_idx], x[val_idx], y[val_idx], _rows(context, val_idx), config, reporter)
    reporter.progress(0.85, "training the fast tier (auto:fast)")
    _fit_fast_tier(result, [texts[i] for i in train_idx], x[train_idx], y[train_idx], [texts[i] for i in val_idx], x[val_idx], y[val_idx],
                   experts, model_kwargs, config, reporter)
    diagnostics = diagnose(predict_logits(result.model, x[val_idx], _rows(context, val_idx)), y[val_idx], len(experts), experts)
    result.metrics["diagnostics"] = diagnostics
    result.metrics["experts_without_examples"] = without
    if diagnostics["undecided"]:
        reporter.log(f"undecided experts (their logits barely vary): {', '.join(diagnostics['undecided'])}")
    reporter.progress(0.9, f"validation accuracy {result.metrics['val']['accuracy']:.3f}, ECE {diagnostics['ece_calibrated']:.3f} after temperature scaling")
    gate_hits = _hits(result.router, experts, examples, x, y, gate_idx)
    result.metrics["gate"] = {"n": len(gate_idx), "source": gate_source, "accuracy": _accuracy(gate_hits)}
    make_active, verdict = True, {"policy": activate, "activated": True, "reason": "no active router" if active is None else "always activate"}
    if activate == "never":
        make_active = False
        verdict = {"policy": activate, "activated": False, "reason": "kept as a candidate, as asked: activate it on its training run's page"}
        reporter.log(verdict["reason"])
    elif activate == "if_better" and active is not None:
        verdict = _compare_with_active(active, examples, x, y, gate_idx, experts, gate_hits, gate_source)
        make_active = verdict["activated"]
        reporter.log(verdict["reason"])
    result.metrics["activation"] = verdict
    return _save_version(result, experts, fingerprint, params, len(train_idx), len(val_idx), job_id, activate=make_active)


def _fit_knowledge(result: Any, experts: list[str], texts_val: list[str], x_val: np.ndarray, y_val: np.ndarray, context_val: Context | None,
                   config: TrainConfig, reporter: JobReporter) -> None:
    """Fit knowledge-aware routing (``routing.ml.knowledge``) on the validation questions, when every expert has documents.

    The outcome goes to ``result.metrics["knowledge"]``: the combiner's validation report and its own
    abstain threshold, or why there is none (the setting is off, experts without documents, or the
    vector store cannot be read). A combiner that validation did not keep is not saved.
    """
    from knowledge.evidence import evidence_lookup, experts_without_documents
    from knowledge.stores import StoreUnavailable
    from knowledge.vocabulary import distinct_words

    from .ml.knowledge import FIT_CANDIDATES, KnowledgeCombiner, MissingKnowledge, evidence_matrix
    from .ml.training import abstain_threshold

    if not settings.ROUTER_KNOWLEDGE:
        result.metrics["knowledge"] = {"fitted": False, "reason": "ROUTER_KNOWLEDGE is off"}
        return
    try:
        without = experts_without_documents(experts)
        if without:
            raise MissingKnowledge(without)
        router = result.router
        probs, score = router.scores(x_val, texts_val, context_val)
        dense, keywords = evidence_matrix(evidence_lookup(experts), probs, x_val, texts_val, k=FIT_CANDIDATES)
        words = distinct_words(experts)
        words_val = words.scores(texts_val)
        combiner = KnowledgeCombiner.fit(probs, score, dense, keywords, y_val, experts, seed=config.seed,
                                         held_out_score=router.held_out_scores(x_val, texts_val, y_val, context_val),
                                         words=words_val, held_out_words=words.scores(texts_val, exclude=y_val))
    except (MissingKnowledge, StoreUnavailable) as exc:
        result.metrics["knowledge"] = {"fitted": False, "reason": str(exc)}
        reporter.log(f"routing without the experts' documents as evidence: {exc}")
        return
    result.metrics["knowledge"] = {"fitted": True, **combiner.report, "ranks": combiner.active, "in_scope": combiner.in_scope}
    if combiner.serves:
        router.knowledge = combiner
        _combined, scores = combiner.combine(probs, score, dense, keywords, words_val)
        # Serving compares the combined in-scope score with this threshold instead of the router's.
        result.metrics["knowledge"]["abstain_threshold"] = abstain_threshold(scores, config.target_recall)
    reporter.log(f"knowledge-aware routing: ranking {'on' if combiner.active else 'off'} (validation accuracy {combiner.report['val_accuracy_router']:.3f} "
                 f"for the router alone, {combiner.report['val_accuracy_cv'] or 0:.3f} cross-validated with the documents), "
                 f"in abstention {'on' if combiner.in_scope else 'off'}")


def _fit_fast_tier(result: Any, texts_train: list[str], x_train: np.ndarray, y_train: np.ndarray, texts_val: list[str], x_val: np.ndarray,
                   y_val: np.ndarray, experts: list[str], model_kwargs: dict[str, Any], config: TrainConfig, reporter: JobReporter) -> None:
    """Distil the fast tier's encoder and train its router (``routing.ml.textrouter.train_fast_tier``), when ``ROUTER_FAST_TIER`` is on.

    The encoder learns from the training questions and the sentences of the experts' documents
    (embedded here by the sentence encoder); the router from the questions.

    The outcome goes to ``result.metrics["fast_tier"]``; a tier that cannot be trained (an encoder
    folder without a tokenizer or weights file, a diverged distillation) is left out with the reason,
    and the router still trains: ``auto:fast`` then uses the full router.
    """
    from encoders import resolve_model_path
    from knowledge.selectors import expert_document_texts

    from .ml.textrouter import fast_tier_from_model

    if not settings.ROUTER_FAST_TIER:
        result.metrics["fast_tier"] = {"trained": False, "reason": "ROUTER_FAST_TIER is off"}
        return
    try:
        tier, report = fast_tier_from_model(resolve_model_path(settings.EMBEDDING_MODEL), texts_train, x_train, y_train, texts_val, x_val, y_val,
                                            len(experts), expert_document_texts(experts), encode_texts, model_kwargs, config)
    except (ValueError, TrainingDiverged) as exc:
        result.metrics["fast_tier"] = {"trained": False, "reason": str(exc)}
        reporter.log(f"no fast tier: {exc}")
        return
    result.router.fast = tier
    result.metrics["fast_tier"] = {"trained": True, **report}
    reporter.log(f"fast tier: validation accuracy {report['val']['accuracy']:.3f} (full router {result.metrics['val']['accuracy']:.3f}), "
                 f"its encoder at cosine {report['distil']['best_val_cosine']:.3f} with the full one")


def _hits(router: TextRouter, model_experts: list[str], examples: list[Any], x: np.ndarray, y: np.ndarray, idx: list[int],
          experts: list[str] | None = None) -> list[bool]:
    """Whether a router routes each of ``idx`` to its labelled expert (an expert it does not know is a miss)."""
    if not idx:
        return []
    experts = experts or model_experts
    context = _conversation_context(examples, x) if router.context_dim > 0 else None
    probs, _ = router.scores(x[idx], [examples[i].text for i in idx], _rows(context, idx))
    chosen = [model_experts[i] if i < len(model_experts) else "" for i in probs.argmax(axis=1)]
    return [c == experts[y[i]] for c, i in zip(chosen, idx, strict=True)]


def _accuracy(hits: list[bool]) -> float | None:
    return float(np.mean(hits)) if hits else None


def _mcnemar(candidate: list[bool], active: list[bool]) -> dict[str, Any]:
    """The paired comparison of two routers on the same questions: on how many only the candidate (``new_only``)
    or only the active one (``active_only``) is right, and McNemar's exact two-sided p-value (a binomial test
    on those discordant questions; 1.0 when there are none)."""
    from scipy.stats import binomtest

    new_only = sum(1 for a, b in zip(candidate, active, strict=True) if a and not b)
    active_only = sum(1 for a, b in zip(candidate, active, strict=True) if b and not a)
    p = float(binomtest(new_only, new_only + active_only, 0.5).pvalue) if new_only + active_only else 1.0
    return {"new_only": new_only, "active_only": active_only, "p_value": round(p, 4)}


def _compare_with_active(
    active: RouterVersion, examples: list[Any], x: np.ndarray, y: np.ndarray, gate_idx: list[int], experts: list[str],
    candidate_hits: list[bool], gate_source: str,
) -> dict[str, Any]:
    """Accuracy of the candidate and of the active router on the gate, and whether the candidate beats it.

    The gate's questions (``gate_split``) trained and tuned neither router: the candidate's
    validation split, on which it early-stopped and was calibrated, would flatter it. An expert the
    active router does not know counts as a miss for it (that is what serving it would do). Without
    gate questions nothing can be compared fairly, and the candidate is kept with that reason.
    The verdict also gives the paired comparison (``_mcnemar``): the questions only one of them routes
    right, and how likely such a split is between two equally good routers; the decision itself stays
    the policy's (a higher accuracy).
    """
    base = {"policy": "if_better", "active_version": active.version, "n_heldout": len(gate_idx), "heldout": gate_source}
    if not gate_idx:
        return {**base, "activated": False, "candidate_accuracy": None, "active_accuracy": None,
                "reason": f"kept as a candidate: no held-out questions to compare it with active v{active.version} "
                          f"(an expert needs {GATE_MIN_PER_EXPERT} labelled queries to lend some); activate it by hand"}
    try:
        model = TextRouter.load(active.path, with_fast=False)
    except (OSError, ValueError, KeyError) as exc:
        return {**base, "activated": True, "reason": f"active router v{active.version} cannot be loaded ({exc}); the new one replaces it"}
    active_hits = _hits(model, list(active.experts), examples, x, y, gate_idx, experts=experts)
    active_accuracy, candidate = _accuracy(active_hits) or 0.0, _accuracy(candidate_hits) or 0.0
    better = candidate > active_accuracy
    paired = _mcnemar(candidate_hits, active_hits)
    caveat = "" if "gate" in (active.metrics or {}) else f" (v{active.version} predates the gate and may have trained on some of them)"
    reason = (
        f"new router: held-out accuracy {candidate:.3f} against {active_accuracy:.3f} for active v{active.version} "
        f"on the same {len(gate_idx)} questions that neither trained nor tuned on ({gate_source}){caveat}; "
        f"only the new one routes {paired['new_only']} of them right, only the active one {paired['active_only']} "
        f"(McNemar's exact p = {paired['p_value']:.3g}); "
        + ("activated" if better else "kept as a candidate (it does not beat the active router)")
    )
    return {**base, "activated": better, "reason": reason, "candidate_accuracy": candidate, "active_accuracy": active_accuracy,
            "paired": paired}


def _rows(context: Context | None, idx: list[int]) -> Context | None:
    return None if context is None else Context(context.turns[idx], context.lengths[idx])


def _save_version(result: Any, experts: list[str], fingerprint: str, params: dict[str, Any], n_train: int, n_val: int, job_id: int | None, activate: bool = True) -> RouterVersion:
    root = Path(settings.ROUTER_DIR)
    root.mkdir(parents=True, exist_ok=True)
    # Written to a temporary folder, then renamed: a half-written artefact is never activated.
    tmp = root / f".tmp-{uuid.uuid4().hex}"
    result.router.save(tmp)
    (tmp / "experts.json").write_text(json.dumps(experts))
    with transaction.atomic():
        number = (RouterVersion.objects.select_for_update().order_by("-version").values_list("version", flat=True).first() or 0) + 1
        final = root / f"v{number}"
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        if activate:
            RouterVersion.objects.filter(is_active=True).update(is_active=False)
        version = RouterVersion.objects.create(
            version=number, path=str(final), experts=experts, embedding_model=embedding_space(),
            data_fingerprint=fingerprint, metrics={k: v for k, v in result.metrics.items() if k != "diagnostics"}, is_active=activate,
        )
        TrainingRun.objects.create(
            job_id=job_id, params={**params, **result.config}, history=result.history, metrics=result.metrics,
            n_train=n_train, n_val=n_val, router_version=version,
        )
    return version


# Shared with every other router training (the demo's too): a second request while one runs opens the running job.
TRAIN_JOB_KEY = "train_router"


def enqueue_training(params: dict[str, Any], user: Any) -> Job:
    """Enqueue a router training with ``params`` (``routing.forms.TrainRouterForm``'s, ``activation`` among them) for a staff
    ``user``, or with no user for the platform itself (``manage.py experts train``, a schedule).

    Raises:
        PermissionDenied: ``user`` is not staff (a router serves every team).
    """
    from . import tasks  # tasks import this module

    if user is not None and not is_staff(user):
        raise PermissionDenied("Only staff users may train the router.")
    return enqueue_once("train_router", TRAIN_JOB_KEY, "Train router", tasks.train_router, params, user=user)


@transaction.atomic
def activate_version(version: RouterVersion) -> RouterVersion:
    """Make ``version`` the one that serves (one UPDATE pair in a transaction: atomic switch)."""
    RouterVersion.objects.filter(is_active=True).exclude(pk=version.pk).update(is_active=False)
    RouterVersion.objects.filter(pk=version.pk).update(is_active=True)
    version.refresh_from_db()
    return version


def relocate_router_folders(old_root: str, new_root: str) -> int:
    """Point the router versions kept under ``old_root`` at the same folders under ``new_root`` (a backup restored
    into another data folder: ``operations.restore``); returns how many moved."""
    old, new = str(old_root).rstrip("/"), str(new_root).rstrip("/")
    moved = 0
    for version in RouterVersion.objects.filter(path__startswith=f"{old}/"):
        version.path = new + version.path[len(old):]
        version.save(update_fields=["path"])
        moved += 1
    return moved
