"""Training and activating routers, routing a question, and answering it end to end."""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from django.conf import settings
from django.db import transaction
from django.db.models.signals import post_delete, post_save

from experts.generation import AdapterRef, GenerationError, GenerationRequest, get_generator
from experts.ml.extractive import Answer, Passage
from experts.models import Expert, ExpertVersion
from experts.selectors import active_expert_slugs, active_experts, experts_by_slug, fallback_slugs, serving_cached, serving_version
from experts.selectors import clear_serving_caches as clear_experts_caches
from jobs.services import JobFailed, JobReporter
from knowledge import services as knowledge
from knowledge.stores import StoreUnavailable
from labeling import selectors as labeling_selectors
from labeling.services import embed_missing, load_embeddings
from sbcommon.encoders import get_encoder

from . import conversations, events
from .experiments.serving import ArmAssignment, assign
from .ml.arbiter import MAX_TOP_K, Arbiter, LoadWindow
from .ml.diagnostics import diagnose
from .ml.router import NumpyScorer, RouterNet
from .ml.training import DEFAULT_MODEL_KWARGS, Context, TrainConfig, TrainingDiverged, predict_logits, train_router
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


CONTEXT_TURNS = 5


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


def train_router_from_labels(
    params: dict[str, Any] | None = None, reporter: JobReporter | None = None, job_id: int | None = None, *, activate: str = "always",
) -> RouterVersion:
    """Train a router on the latest promoted clustering run and activate it.

    If the active router was trained on exactly the same data and parameters, it is kept as is.
    ``activate="if_better"`` (scheduled retraining) activates the new version only when it beats the
    active router's accuracy on the same held-out split; otherwise it is stored inactive, as a
    candidate, with the reason in ``metrics["activation"]``. With no active router, it activates.
    A run that cannot train (fewer than two experts, NaN losses, bad parameters) fails with
    ``JobFailed`` and activates nothing. Diagnostics of the validation split (per-expert precision
    and recall, confusion, load, calibration, undecided experts) are stored in the run's metrics.
    """
    reporter = reporter or JobReporter()
    params = dict(params or {})
    run = labeling_selectors.latest_promoted_run()
    if run is None:
        raise JobFailed("no promoted clustering run: promote proposals to experts first")
    examples = [e for e in labeling_selectors.routing_examples(run) if e.split != "test"]
    experts = sorted({e.expert for e in examples})
    if len(experts) < 2:
        raise JobFailed(f"a router needs at least two experts with queries; found {len(experts)} ({', '.join(experts) or 'none'})")
    without = sorted(set(active_experts().filter(is_fallback=False).values_list("slug", flat=True)) - set(experts))
    if without:
        # Defined behaviour: an expert without labelled queries is left out of the router (it cannot
        # be learned); it stays reachable by its slug and the console lists it here.
        reporter.log(f"experts without labelled queries are not routable: {', '.join(without)}")
    fingerprint = hashlib.sha256(json.dumps([run.pk, [e.query_id for e in examples], experts, params, settings.EMBEDDING_MODEL], sort_keys=True).encode()).hexdigest()
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
    x = load_embeddings([e.query_id for e in examples], settings.EMBEDDING_MODEL)
    y = np.array([experts.index(e.expert) for e in examples])
    train_idx, val_idx = _split(examples, float(params.get("val_share", 0.15)), int(params.get("seed", 0)))
    missing = sorted(set(experts) - {experts[y[i]] for i in train_idx})
    if missing:
        raise JobFailed(f"experts with no training queries after the validation split: {', '.join(missing)}; label more queries for them")
    reporter.progress(0.1, f"training on {len(train_idx)} queries, validating on {len(val_idx)}")
    config = TrainConfig(**{k: v for k, v in params.items() if k in TrainConfig.__dataclass_fields__})
    model_kwargs = {**DEFAULT_MODEL_KWARGS, **{k: v for k, v in params.items() if k in RouterNet.config_keys and k not in ("input_dim", "n_experts")}}
    context = _conversation_context(examples, x) if int(model_kwargs.get("context_dim", 0) or 0) > 0 else None
    try:
        result = train_router(
            x[train_idx], y[train_idx], x[val_idx], y[val_idx], len(experts), model_kwargs, config,
            context_train=_rows(context, train_idx), context_val=_rows(context, val_idx),
        )
    except TrainingDiverged as exc:
        raise JobFailed(f"training diverged, nothing was activated: {exc}") from exc
    except (ValueError, TypeError) as exc:
        raise JobFailed(f"cannot train a router: {exc}") from exc
    diagnostics = diagnose(predict_logits(result.model, x[val_idx], _rows(context, val_idx)), y[val_idx], len(experts), experts)
    result.metrics["diagnostics"] = diagnostics
    result.metrics["experts_without_examples"] = without
    if diagnostics["undecided"]:
        reporter.log(f"undecided experts (their logits barely vary): {', '.join(diagnostics['undecided'])}")
    reporter.progress(0.9, f"validation accuracy {result.metrics['val']['accuracy']:.3f}, ECE {diagnostics['ece_calibrated']:.3f} after temperature scaling")
    make_active, verdict = True, {"policy": activate, "activated": True, "reason": "no active router" if active is None else "always activate"}
    if activate == "if_better" and active is not None:
        verdict = _compare_with_active(active, examples, x, y, val_idx, experts, float(result.metrics["val"]["accuracy"]))
        make_active = verdict["activated"]
        reporter.log(verdict["reason"])
    result.metrics["activation"] = verdict
    return _save_version(result, experts, fingerprint, params, len(train_idx), len(val_idx), job_id, activate=make_active)


def _compare_with_active(active: RouterVersion, examples: list[Any], x: np.ndarray, y: np.ndarray, val_idx: list[int], experts: list[str], candidate_accuracy: float) -> dict[str, Any]:
    """Accuracy of the active router on the candidate's held-out split, and whether the candidate beats it.

    Both are scored on the same questions and labels; an expert the active router does not know
    counts as a miss for it (that is what serving it would do).
    """
    try:
        model = RouterNet.load(active.path)
    except (OSError, ValueError) as exc:
        return {"policy": "if_better", "activated": True, "reason": f"active router v{active.version} cannot be loaded ({exc}); the new one replaces it"}
    context = _conversation_context(examples, x) if int(getattr(model, "context_dim", 0) or 0) > 0 else None
    logits = predict_logits(model, x[val_idx], _rows(context, val_idx))
    chosen = [active.experts[i] if i < len(active.experts) else "" for i in logits.argmax(axis=1)]
    active_accuracy = float(np.mean([c == experts[y[i]] for c, i in zip(chosen, val_idx, strict=True)])) if val_idx else 0.0
    better = candidate_accuracy > active_accuracy
    reason = (
        f"new router: held-out accuracy {candidate_accuracy:.3f} against {active_accuracy:.3f} for active v{active.version} "
        f"on the same {len(val_idx)} questions; " + ("activated" if better else "kept as a candidate (it does not beat the active router)")
    )
    return {"policy": "if_better", "activated": better, "reason": reason, "candidate_accuracy": candidate_accuracy,
            "active_accuracy": active_accuracy, "active_version": active.version, "n_heldout": len(val_idx)}


def _rows(context: Context | None, idx: list[int]) -> Context | None:
    return None if context is None else Context(context.turns[idx], context.lengths[idx])


def _save_version(result: Any, experts: list[str], fingerprint: str, params: dict[str, Any], n_train: int, n_val: int, job_id: int | None, activate: bool = True) -> RouterVersion:
    root = Path(settings.ROUTER_DIR)
    root.mkdir(parents=True, exist_ok=True)
    # Written to a temporary folder, then renamed: a half-written artefact is never activated.
    tmp = root / f".tmp-{uuid.uuid4().hex}"
    result.model.save(tmp)
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
            version=number, path=str(final), experts=experts, embedding_model=settings.EMBEDDING_MODEL,
            data_fingerprint=fingerprint, metrics={k: v for k, v in result.metrics.items() if k != "diagnostics"}, is_active=activate,
        )
        TrainingRun.objects.create(
            job_id=job_id, params={**params, **result.config}, history=result.history, metrics=result.metrics,
            n_train=n_train, n_val=n_val, router_version=version,
        )
    return version


@transaction.atomic
def activate_version(version: RouterVersion) -> RouterVersion:
    """Make ``version`` the one that serves (one UPDATE pair in a transaction: atomic switch)."""
    RouterVersion.objects.filter(is_active=True).exclude(pk=version.pk).update(is_active=False)
    RouterVersion.objects.filter(pk=version.pk).update(is_active=True)
    version.refresh_from_db()
    return version


# --- serving -------------------------------------------------------------------------------------

class RoutingUnavailable(Exception):
    """No trained router or no experts: the request cannot be routed."""


class InvalidQuestion(ValueError):
    """The question cannot be routed as given (empty, or a bad top_k)."""


class ExpertNotAllowed(Exception):
    """The caller's API key may not reach the expert(s) the request needs."""


class AllExpertsDown(Exception):
    """Every candidate expert failed or has its circuit breaker open; ``failover_from`` says why."""

    def __init__(self, failover_from: list[dict[str, str]]):
        self.failover_from = failover_from
        reasons = ", ".join(f"{f['slug']}: {f['reason']}" for f in failover_from) or "no candidate expert"
        super().__init__(f"no expert could answer ({reasons})")


class StreamInterrupted(Exception):
    """The generator failed after part of the answer had been streamed (no failover is possible then)."""

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(message)


NO_EXPERT_ANSWER = "No expert covers this question."

_router_cache: dict[str, Any] = {}
_router_lock = threading.Lock()


def _arbiter_for(version: RouterVersion) -> Arbiter:
    threshold = (version.metrics or {}).get("abstain_threshold")
    penalty = getattr(settings, "ROUTER_LOAD_PENALTY", None)
    return Arbiter(
        window=LoadWindow(int(getattr(settings, "ROUTER_LOAD_WINDOW", 500))),
        load_penalty=None if penalty in (None, "") else float(penalty),
        capacity=float(getattr(settings, "ROUTER_CAPACITY", 1.0)),
        abstain_threshold=None if threshold is None else float(threshold),
    )


def clear_serving_caches(*_args: Any, **_kwargs: Any) -> None:
    """Forget what serving read of router versions, experts and expert versions (in this process).

    They share ``experts.selectors``' cache. Saving or deleting a RouterVersion, Expert or
    ExpertVersion through the ORM calls this; ``activate_version`` (queryset updates) and other
    processes rely on ``SERVING_CACHE_TTL_S``.
    """
    clear_experts_caches()


post_save.connect(clear_serving_caches, sender=RouterVersion, dispatch_uid="serving-cache-save-RouterVersion")
post_delete.connect(clear_serving_caches, sender=RouterVersion, dispatch_uid="serving-cache-delete-RouterVersion")


def _router_version(key: str, number: int | None) -> RouterVersion | None:
    """The active RouterVersion (or version ``number``), kept with the serving caches for SERVING_CACHE_TTL_S seconds."""

    def load() -> RouterVersion | None:
        query = RouterVersion.objects.filter(is_active=True) if number is None else RouterVersion.objects.filter(version=number)
        return query.first()

    return serving_cached(("router-version", key), load)


def _active_router(number: int | None = None) -> tuple[RouterVersion, RouterNet, Arbiter, NumpyScorer | None]:
    """The active version (or version ``number``, for an experiment arm), its network, arbiter and numpy scorer, loaded once per process."""
    key = "active" if number is None else f"v{number}"
    version = _router_version(key, number)
    if version is None:
        if number is None:
            raise RoutingUnavailable("no router has been trained yet; train one in the console or run the demo")
        raise RoutingUnavailable(f"router v{number} (named by an experiment arm) does not exist")
    with _router_lock:
        cached = _router_cache.get(key)
        if cached is None or (cached[0].pk, cached[0].path) != (version.pk, version.path):
            model = RouterNet.load(version.path)
            cached = (version, model, _arbiter_for(version), model.numpy_scorer())
            _router_cache[key] = cached
    return cached


def reset_load_window() -> None:
    """Forget the recent routing decisions (the arbiter's load window) of the cached router."""
    with _router_lock:
        cached = _router_cache.get("active")
        if cached is not None:
            cached[2].window.clear()


@dataclass
class Decision:
    """The router's ranked choice for one question.

    ``experts`` is the final ranking (after the load penalty and capacity limits), best first, with
    the adjusted scores; ``failover`` its first three, tried in order when an expert fails;
    ``raw_scores`` the calibrated router probability of every live expert. When the question looks
    like nothing the router was trained on (``score`` below the version's abstain threshold)
    ``abstained`` is true and ``fallback`` names the fallback expert, if one is configured.
    """

    experts: list[dict[str, float | str]]
    router_version: int | None
    embed_ms: float
    route_ms: float
    vector: list[float] = field(repr=False, default_factory=list)
    abstained: bool = False
    failover: list[dict[str, float | str]] = field(default_factory=list)
    raw_scores: dict[str, float] = field(default_factory=dict)
    score: float | None = None
    fallback: str | None = None
    context_turns: int = 0


def _clean_question(question: str) -> str:
    text = (question or "").strip()
    if not text:
        raise InvalidQuestion("the question is empty")
    # The encoder reads at most 256 tokens; longer texts are cut here so a 50,000-character paste
    # costs no more than a long question.
    return text[: int(settings.MAX_QUESTION_CHARS)]


def route(
    question: str, top_k: int | None = None, context: list[str] | None = None, *,
    context_vectors: np.ndarray | None = None, router_version: int | None = None, allowed: set[str] | None = None,
) -> Decision:
    """Rank the active experts for ``question`` with the active router.

    Args:
        question: the user's question (stripped; cut to ``MAX_QUESTION_CHARS`` characters).
        top_k: experts to choose, 1-3 (default ``ROUTER_TOP_K``).
        context: earlier user turns of the conversation, oldest first (used by routers trained
            with a context path, ignored by others).
        context_vectors: the same as embeddings already computed (a stored conversation); used
            when ``context`` is empty.
        router_version: route with this RouterVersion.version instead of the active one (an
            experiment arm).
        allowed: the only expert slugs to consider (an API key's scope); None: all of them.

    Raises:
        InvalidQuestion: an empty question or a top_k outside 1-3.
        RoutingUnavailable: no active router, or none of its experts is active.
        ExpertNotAllowed: ``allowed`` leaves none of the router's experts.
    """
    top_k = settings.ROUTER_TOP_K if top_k is None else top_k
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InvalidQuestion(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    question = _clean_question(question)
    version, model, arbiter, scorer = _active_router(router_version)
    t0 = time.perf_counter()
    encoder = get_encoder()
    vector = encoder.encode([question])[0]
    t1 = time.perf_counter()
    ctx, lengths = None, None
    if model.context_dim:
        texts = [c for c in (context or []) if c and c.strip()]
        turns = encoder.encode([_clean_question(c) for c in texts][-CONTEXT_TURNS:]) if texts else context_vectors
        if turns is not None and len(turns):
            turns = np.asarray(turns, dtype=np.float32)[-CONTEXT_TURNS:]
            ctx, lengths = torch.from_numpy(turns[None, :, :]), torch.tensor([len(turns)])
    if scorer is not None and ctx is None:
        probs_a, score = scorer(np.asarray(vector, dtype=np.float32))
        probs = probs_a.tolist()
    else:
        with torch.inference_mode():
            probs_t, score_t = model.route_scores(torch.from_numpy(np.asarray(vector, dtype=np.float32)[None, :]), ctx, lengths)
        probs, score = probs_t[0].tolist(), float(score_t[0])
    live = active_expert_slugs()
    raw = {slug: p for slug, p in zip(version.experts, probs, strict=True) if slug in live}
    if not raw:
        raise RoutingUnavailable("none of the router's experts is active")
    if allowed is not None:
        raw = {slug: p for slug, p in raw.items() if slug in allowed}
        if not raw:
            raise ExpertNotAllowed("this API key may not reach any of the router's experts")
    decided = arbiter.decide(raw, top_k=int(top_k), score=score)
    fallback = None
    if decided.abstained:
        fallback = next((s for s in fallback_slugs() if allowed is None or s in allowed), None)
    t2 = time.perf_counter()
    ranked = [{"slug": s, "score": round(a, 4)} for s, a in decided.ranked[: max(int(top_k), MAX_TOP_K)]]
    return Decision(
        experts=ranked, router_version=version.version, embed_ms=(t1 - t0) * 1000, route_ms=(t2 - t1) * 1000, vector=vector.tolist(),
        abstained=decided.abstained, failover=ranked[:MAX_TOP_K], raw_scores={s: round(p, 6) for s, p in raw.items()}, score=round(score, 6),
        fallback=fallback, context_turns=0 if lengths is None else int(lengths[0]),
    )


@dataclass
class ChatResult:
    """A routed, cited answer and everything needed to explain it."""

    answer: str
    expert: str
    decision: Decision
    citations: list[dict[str, Any]]
    passages: list[dict[str, Any]]
    grounded: bool
    mode: str
    timings: dict[str, float]
    request_id: str
    abstained: bool = False
    fallback_used: bool = False
    failover_from: list[dict[str, str]] = field(default_factory=list)
    conversation_id: str = ""
    sticky: bool = False
    arm: str = ""
    experiment_id: int | None = None
    expert_version: int | None = None
    parts: list[dict[str, Any]] = field(default_factory=list)


# model name → how many experts: ``auto`` fuses the top 2's passages into one answer, ``auto:fast``
# asks the top 1, ``auto:accurate`` lets each of the top 2 answer from its own passages and merges.
MODES = {"auto": 2, "auto:fast": 1, "auto:accurate": 2}


@dataclass
class ChatRequest:
    """One chat turn as the API received it.

    ``history`` holds the earlier messages of the request ([{"role", "content"}], oldest first),
    ``allowed`` the expert slugs the caller's key may reach (None: all), ``user`` OpenAI's end-user
    field (the experiment subject when there is no conversation id).
    """

    question: str
    model: str = "auto"
    history: list[dict[str, str]] = field(default_factory=list)
    conversation_id: str = ""
    user: str = ""
    api_key_id: int | None = None
    allowed: set[str] | None = None
    max_tokens: int | None = None
    temperature: float = 0.0


def _breaker(slug: str):
    from experts.breaker import breaker_for

    return breaker_for(slug)


def _generation_settings(slug: str, arm: ArmAssignment | None) -> tuple[ExpertVersion | None, AdapterRef | None]:
    """The expert version that serves ``slug`` (the arm's, else the active one) and its adapter, if any."""
    version = None
    if arm is not None and slug in arm.expert_versions:
        version = ExpertVersion.objects.filter(expert__slug=slug, version=arm.expert_versions[slug]).select_related("expert").first()
    if version is None:
        version = serving_version(slug)
    adapter = None
    if version is not None and version.adapter_path:
        adapter = AdapterRef(expert=slug, name=version.adapter_name, path=version.adapter_path, base_model=version.base_model, version=version.version)
    return version, adapter


def _to_passages(hits: list[Any]) -> list[Passage]:
    return [
        Passage(text=h.payload.get("text", ""), title=h.payload.get("title", ""), url=h.payload.get("url", ""), score=h.dense_score,
                expert=h.payload.get("expert", ""), document_id=h.payload.get("document_id"), chunk_id=h.id,
                sentence_vectors=knowledge.sentence_vector_reader(h.payload))
        for h in hits
    ]


def _citation_pattern(citation_format: str) -> re.Pattern[str]:
    fmt = citation_format if "{index}" in citation_format else "[{index}]"
    return re.compile(re.escape(fmt).replace(re.escape("{index}"), r"(\d+)"))


def merge_answers(parts: list[tuple[str, str, Answer, str]]) -> Answer:
    """One answer from several experts' answers: each part labelled by its expert, citations renumbered.

    Args:
        parts: (slug, expert name, answer, citation format) per expert, best first. Parts that
            found nothing are left out when another part is grounded.
    """
    grounded = [p for p in parts if p[2].grounded]
    kept = grounded or parts[:1]
    texts, citations = [], []
    for slug, name, answer, fmt in kept:
        offset = len(citations)
        n = len(answer.citations)

        def renumber(m: re.Match[str], offset: int = offset, n: int = n, fmt: str = fmt) -> str:
            i = int(m.group(1))
            return fmt.replace("{index}", str(i + offset)) if 1 <= i <= n else m.group(0)

        text = _citation_pattern(fmt).sub(renumber, answer.text) if offset else answer.text
        texts.append(f"{name} ({slug}): {text}")
        citations.extend(answer.citations)
    return Answer(text="\n\n".join(texts), citations=citations, grounded=bool(grounded))


class ChatTurn:
    """One chat request through route → retrieve → generate with failover, streamed or not.

    ``start()`` does everything up to the first piece of the answer: it routes, picks the
    candidates (stickiness, experiment arm, key scope), and walks them in order, skipping experts
    whose circuit breaker is open, failing over on ``StoreUnavailable`` and ``GenerationError``,
    until one expert produced its first output. Errors there raise before any byte is sent.
    Iterating the turn yields the rest of the answer as text deltas; when it ends, ``result``
    holds the ``ChatResult``. The routing event is recorded exactly once: on success, on an error,
    or from ``close()`` when the client went away (status 499, ``client_cancelled``).
    """

    def __init__(self, request: ChatRequest):
        self.request = request
        self.request_id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.result: ChatResult | None = None
        self.decision: Decision | None = None
        self.conversation: conversations.ConversationState | None = None
        self.arm: ArmAssignment | None = None
        self.failover_from: list[dict[str, str]] = []
        self.timings = {"embed_ms": 0.0, "route_ms": 0.0, "retrieve_ms": 0.0, "generate_ms": 0.0}
        self.sticky = self.abstained = self.fallback_used = False
        self.expert = ""
        self.expert_version: int | None = None
        self._recorded = False
        self._t0 = time.perf_counter()
        self._stream: Iterator[str | Answer] | None = None
        self._first: str | Answer | None = None
        self._passages: list[Passage] = []
        self._parts: list[dict[str, Any]] = []
        self._streamed: list[str] = []
        self._answer_breaker: Any = None

    # -- before the first byte ---------------------------------------------------------------

    def start(self, stream: bool = False) -> ChatTurn:
        """Route and get the first output of an expert. Raises (and records) what makes the request fail."""
        try:
            self._start(stream)
        except RoutingUnavailable:
            self._record(503, "routing_unavailable")
            raise
        except (ExpertNotAllowed, conversations.ConversationNotAllowed):
            self._record(403, "permission_denied")
            raise
        except AllExpertsDown:
            self._record(503, "no_expert_available")
            raise
        return self

    def _start(self, stream: bool) -> None:
        req = self.request
        question = _clean_question(req.question)
        self.question = question
        self.conversation = conversations.resolve(req.conversation_id, req.api_key_id)
        subject = req.conversation_id or (f"user:{req.user}" if req.user else "") or (f"key:{req.api_key_id}" if req.api_key_id else "")
        self.arm = assign(subject or self.conversation.conversation_id)
        if req.model in MODES:
            candidates = self._routed_candidates(question)
        else:
            if req.allowed is not None and req.model not in req.allowed:
                raise ExpertNotAllowed(f"this API key may not reach expert {req.model!r}")
            t0 = time.perf_counter()
            vector = get_encoder().encode([question])[0]
            self.decision = Decision(experts=[{"slug": req.model, "score": 1.0}], router_version=None, embed_ms=(time.perf_counter() - t0) * 1000,
                                     route_ms=0.0, vector=vector.tolist())
            candidates = [req.model]
        self.timings["embed_ms"], self.timings["route_ms"] = self.decision.embed_ms, self.decision.route_ms
        if not candidates:  # abstained without a fallback expert: say so, nothing retrieved or generated
            self._first = Answer(text=NO_EXPERT_ANSWER, citations=[], grounded=False)
            return
        if req.model == "auto:accurate" and len(candidates) > 1 and not self.abstained:
            self._first = self._accurate(candidates)
        else:
            self._first_output(candidates, width=MODES.get(req.model, 1), stream=stream)

    def _routed_candidates(self, question: str) -> list[str]:
        """Route (with the conversation as context), apply stickiness; the experts to try in order."""
        req, conv = self.request, self.conversation
        assert conv is not None
        earlier = [m["content"] for m in req.history if m.get("role") == "user" and m.get("content", "").strip()]
        stored = None if earlier else conversations.decode_turns(conv.turns or [])
        self.decision = route(
            question, top_k=MODES[req.model], context=earlier or None, context_vectors=stored,
            router_version=self.arm.router_version if self.arm else None, allowed=req.allowed,
        )
        d = self.decision
        if d.abstained:
            self.abstained = True
            if conv.expert and (req.allowed is None or conv.expert in req.allowed) and conv.expert in d.raw_scores:
                self.sticky = True  # nothing is clearly better than the conversation's expert
                return [conv.expert]
            if d.fallback:
                self.fallback_used = True
                return [d.fallback]
            return []
        ranked, self.sticky = conversations.sticky_order(d.failover, conv.expert, float(settings.CONVERSATION_STICKY_MARGIN))
        return [str(e["slug"]) for e in ranked]

    def _retrieve(self, slugs: list[str], weights: list[float] | None) -> list[Passage]:
        experts = experts_by_slug(slugs)
        chosen = [experts[s] for s in slugs if s in experts]
        t0 = time.perf_counter()
        try:
            hits = knowledge.search_experts(chosen, self.question, limit=settings.RETRIEVAL_TOP_K, weights=weights,
                                            query_vector=self.decision.vector if self.decision else None, allowed=self.request.allowed)
        finally:
            self.timings["retrieve_ms"] += (time.perf_counter() - t0) * 1000
        return _to_passages(hits)

    def _generation_request(self, slug: str, passages: list[Passage]) -> GenerationRequest:
        version, adapter = _generation_settings(slug, self.arm)
        self.expert_version = version.version if version is not None else None
        return GenerationRequest(
            question=self.question, expert=slug, passages=passages, history=list(self.request.history),
            system_prompt=version.system_prompt if version else "", citation_format=version.citation_format if version else "[{index}]",
            adapter=adapter, max_tokens=self.request.max_tokens, temperature=self.request.temperature,
        )

    def _fail(self, slug: str, reason: str, breaker: Any | None = None) -> None:
        if breaker is not None:
            breaker.record_failure(reason)
        self.failover_from.append({"slug": slug, "reason": reason})
        logger.warning("chat.failover", extra={"expert": slug, "reason": reason, "request_id": self.request_id})

    def _first_output(self, candidates: list[str], width: int, stream: bool) -> None:
        """Walk the candidates until one expert retrieved and produced its first output (the failover loop).

        In ``auto`` the next healthy candidate's passages are fused in, and the expert whose passage
        ranks first answers (its own adapter fits those passages best); if it fails, the candidate
        itself answers from the same passages. A half-open breaker's probe answers alone.
        """
        failed: set[str] = set()
        for position, slug in enumerate(candidates):
            if slug in failed:
                continue
            breaker = _breaker(slug)
            if not breaker.allow():
                self._fail(slug, "circuit_open")
                failed.add(slug)
                continue
            probing = breaker.state != "closed"
            partners = [] if probing else [s for s in candidates[position + 1 :] if s not in failed and _breaker(s).state == "closed"][: width - 1]
            slugs = [slug, *partners]
            raw = self.decision.raw_scores if self.decision else {}
            weights = [float(raw.get(s, 0.0)) for s in slugs] if raw else None
            try:
                passages = self._retrieve(slugs, weights)
            except StoreUnavailable:
                self._fail(slug, "store_unavailable", breaker)
                failed.add(slug)
                continue
            leading = passages[0].expert if passages else slug
            answerers = [leading, slug] if leading in partners else [slug]
            for answering in answerers:
                gen_breaker = breaker if answering == slug else _breaker(answering)
                t0 = time.perf_counter()
                try:
                    output = self._open_stream(answering, passages, stream)
                except GenerationError as exc:
                    self._fail(answering, exc.kind, gen_breaker)
                    failed.add(answering)
                    continue
                finally:
                    self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000
                self.expert, self._passages, self._first, self._answer_breaker = answering, passages, output, gen_breaker
                if not stream:
                    gen_breaker.record_success()
                self.fallback_used = self.fallback_used or bool(self.failover_from)
                return
        raise AllExpertsDown(self.failover_from)

    def _open_stream(self, slug: str, passages: list[Passage], stream: bool) -> str | Answer:
        generator = get_generator()
        request = self._generation_request(slug, passages)
        if not stream:
            return generator.generate(request)
        self._stream = iter(generator.stream(request))
        try:
            return next(self._stream)
        except StopIteration:
            raise GenerationError("the generator produced nothing") from None

    def _accurate(self, candidates: list[str]) -> Answer:
        """``auto:accurate``: the top two healthy experts answer from their own passages; the answers are merged."""
        names = dict(Expert.objects.filter(slug__in=candidates).values_list("slug", "name"))
        parts: list[tuple[str, str, Answer, str, list[Passage]]] = []
        for slug in candidates:
            if len(parts) == 2:
                break
            breaker = _breaker(slug)
            if not breaker.allow():
                self._fail(slug, "circuit_open")
                continue
            try:
                passages = self._retrieve([slug], None)
            except StoreUnavailable:
                self._fail(slug, "store_unavailable", breaker)
                continue
            request = self._generation_request(slug, passages)
            t0 = time.perf_counter()
            try:
                answer = get_generator().generate(request)
            except GenerationError as exc:
                self._fail(slug, exc.kind, breaker)
                continue
            finally:
                self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000
            breaker.record_success()
            parts.append((slug, names.get(slug, slug), answer, request.citation_format, passages))
        if not parts:
            raise AllExpertsDown(self.failover_from)
        merged = merge_answers([p[:4] for p in parts])
        kept = [p for p in parts if p[2].grounded] or parts[:1]
        self._parts = [{"expert": p[0], "grounded": p[2].grounded, "citations": len(p[2].citations)} for p in kept]
        self.expert = parts[0][0]
        self._passages = [passage for p in parts for passage in p[4]]
        self.fallback_used = bool(self.failover_from)
        self._generation_request(self.expert, [])  # the answering expert's version, for the event
        return merged

    # -- the answer --------------------------------------------------------------------------

    def __iter__(self) -> Iterator[str]:
        """The answer's text deltas after ``start()``; at the end ``result`` is set and the event recorded."""
        item = self._first
        while not isinstance(item, Answer):
            if item:
                self._streamed.append(item)
                yield item
            t0 = time.perf_counter()
            try:
                item = next(self._stream) if self._stream is not None else Answer(text="".join(self._streamed))
            except StopIteration:
                item = Answer(text="".join(self._streamed), citations=[], grounded=False)
            except GenerationError as exc:
                self._answer_breaker.record_failure(exc.kind)
                self._finish(Answer(text="".join(self._streamed), grounded=False), 502, exc.kind)
                raise StreamInterrupted(exc.kind, f"expert {self.expert!r} failed mid-answer: {exc}") from exc
            finally:
                self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000
        if self._stream is not None:
            self._answer_breaker.record_success()
        self._finish(item)

    def _finish(self, answer: Answer, status_code: int = 200, error_kind: str = "") -> None:
        self.result = ChatResult(
            answer=answer.text, expert=self.expert, decision=self.decision or Decision(experts=[], router_version=None, embed_ms=0, route_ms=0),
            citations=[_passage_dict(p, i) for i, p in enumerate(answer.citations, start=1)],
            passages=[_passage_dict(p, i) for i, p in enumerate(self._passages, start=1)], grounded=answer.grounded, mode=self.request.model,
            timings=self._timings(), request_id=self.request_id, abstained=self.abstained, fallback_used=self.fallback_used,
            failover_from=list(self.failover_from), conversation_id=self.conversation.conversation_id if self.conversation else "",
            sticky=self.sticky, arm=self.arm.arm if self.arm else "", experiment_id=self.arm.experiment_id if self.arm else None,
            expert_version=self.expert_version, parts=self._parts,
        )
        if status_code == 200 and self.expert and self.conversation is not None and self.decision is not None:
            conversations.save_turn(self.conversation, self.decision.vector, self.expert, self.request.api_key_id)
        self._record(status_code, error_kind)

    def close(self) -> None:
        """The client went away (or the caller gave up): close the backend stream, record the event as cancelled."""
        if self._stream is not None and hasattr(self._stream, "close"):
            self._stream.close()
        if not self._recorded:
            self._finish(Answer(text="".join(self._streamed), grounded=False), 499, "client_cancelled")

    @property
    def streamed_text(self) -> str:
        """What has been streamed so far (empty when the answer was made whole)."""
        return "".join(self._streamed)

    def _timings(self) -> dict[str, float]:
        timings = dict(self.timings)
        timings["total_ms"] = (time.perf_counter() - self._t0) * 1000
        return timings

    def _record(self, status_code: int, error_kind: str = "") -> None:
        """The routing event of this request (once), through ``routing.events`` (batched off the hot path there)."""
        if self._recorded:
            return
        self._recorded = True
        t, d, r = self._timings(), self.decision, self.result
        question = getattr(self, "question", self.request.question or "")
        events.record(
            request_id=self.request_id, mode=self.request.model, router_version=d.router_version if d else None, expert=self.expert,
            experts=d.experts if d else [], question_chars=len(question), question=question if settings.STORE_QUESTION_TEXT else "",
            grounded=r.grounded if r else False, abstained=self.abstained, fallback_used=self.fallback_used,
            embed_ms=t["embed_ms"], route_ms=t["route_ms"], retrieve_ms=t["retrieve_ms"], generate_ms=t["generate_ms"], total_ms=t["total_ms"],
            status_code=status_code, error_kind=error_kind, conversation_id=self.conversation.conversation_id if self.conversation else "",
            api_key_id=self.request.api_key_id, experiment_id=self.arm.experiment_id if self.arm else None, arm=self.arm.arm if self.arm else "",
            expert_version=self.expert_version, failover_from=list(self.failover_from),
        )


def answer(question: str, model: str = "auto", **request: Any) -> ChatResult:
    """Route ``question``, retrieve from the chosen experts' collections and generate a cited answer.

    ``model`` is ``auto`` (top-2 experts, fused retrieval), ``auto:fast`` (top-1), ``auto:accurate``
    (the top 2 answer separately, merged) or an expert's slug (the router is bypassed). When the
    router abstains the question goes to the fallback expert, or, without one, the answer says that
    no expert covers it. Other keyword arguments are ``ChatRequest`` fields (conversation, key
    scope...). Raises ``RoutingUnavailable``, ``ExpertNotAllowed`` or ``AllExpertsDown``.
    """
    turn = ChatTurn(ChatRequest(question=question, model=model, **request)).start(stream=False)
    for _ in turn:
        pass
    assert turn.result is not None
    return turn.result


def _passage_dict(p: Passage, index: int) -> dict[str, Any]:
    """A citation as the API shows it: the passage's fields, less its sentence vectors."""
    d = {f.name: getattr(p, f.name) for f in fields(p) if f.name != "sentence_vectors"}
    d["index"] = index
    d["score"] = round(float(d["score"]), 4)
    return d
