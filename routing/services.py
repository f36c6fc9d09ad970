"""Training and activating routers, routing a question, and answering it end to end."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from django.conf import settings
from django.db import transaction

from experts.generation import GenerationRequest, get_generator
from experts.ml.extractive import Passage
from experts.selectors import active_experts
from jobs.services import JobFailed, JobReporter
from knowledge import services as knowledge
from labeling import selectors as labeling_selectors
from labeling.services import embed_missing, load_embeddings
from sbcommon.encoders import get_encoder

from .ml.arbiter import MAX_TOP_K, Arbiter, LoadWindow
from .ml.diagnostics import diagnose
from .ml.router import NumpyScorer, RouterNet
from .ml.training import DEFAULT_MODEL_KWARGS, Context, TrainConfig, TrainingDiverged, predict_logits, train_router
from .models import RouterVersion, RoutingEvent, TrainingRun

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


def train_router_from_labels(params: dict[str, Any] | None = None, reporter: JobReporter | None = None, job_id: int | None = None) -> RouterVersion:
    """Train a router on the latest promoted clustering run and activate it.

    If the active router was trained on exactly the same data and parameters, it is kept as is.
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
    return _save_version(result, experts, fingerprint, params, len(train_idx), len(val_idx), job_id)


def _rows(context: Context | None, idx: list[int]) -> Context | None:
    return None if context is None else Context(context.turns[idx], context.lengths[idx])


def _save_version(result: Any, experts: list[str], fingerprint: str, params: dict[str, Any], n_train: int, n_val: int, job_id: int | None) -> RouterVersion:
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
        RouterVersion.objects.filter(is_active=True).update(is_active=False)
        version = RouterVersion.objects.create(
            version=number, path=str(final), experts=experts, embedding_model=settings.EMBEDDING_MODEL,
            data_fingerprint=fingerprint, metrics={k: v for k, v in result.metrics.items() if k != "diagnostics"}, is_active=True,
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


def _active_router() -> tuple[RouterVersion, RouterNet, Arbiter, NumpyScorer | None]:
    """The active version, its network, its arbiter (load window) and its numpy scorer, loaded once per process and version."""
    version = RouterVersion.objects.filter(is_active=True).first()
    if version is None:
        raise RoutingUnavailable("no router has been trained yet; train one in the console or run the demo")
    with _router_lock:
        cached = _router_cache.get("active")
        if cached is None or (cached[0].pk, cached[0].path) != (version.pk, version.path):
            model = RouterNet.load(version.path)
            cached = (version, model, _arbiter_for(version), model.numpy_scorer())
            _router_cache["active"] = cached
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


def _clean_question(question: str) -> str:
    text = (question or "").strip()
    if not text:
        raise InvalidQuestion("the question is empty")
    # The encoder reads at most 256 tokens; longer texts are cut here so a 50,000-character paste
    # costs no more than a long question.
    return text[: int(settings.MAX_QUESTION_CHARS)]


def route(question: str, top_k: int | None = None, context: list[str] | None = None) -> Decision:
    """Rank the active experts for ``question`` with the active router.

    Args:
        question: the user's question (stripped; cut to ``MAX_QUESTION_CHARS`` characters).
        top_k: experts to choose, 1-3 (default ``ROUTER_TOP_K``).
        context: earlier user turns of the conversation, oldest first (used by routers trained
            with a context path, ignored by others).

    Raises:
        InvalidQuestion: an empty question or a top_k outside 1-3.
        RoutingUnavailable: no active router, or none of its experts is active.
    """
    top_k = settings.ROUTER_TOP_K if top_k is None else top_k
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InvalidQuestion(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    question = _clean_question(question)
    version, model, arbiter, scorer = _active_router()
    t0 = time.perf_counter()
    encoder = get_encoder()
    vector = encoder.encode([question])[0]
    t1 = time.perf_counter()
    ctx, lengths = None, None
    if model.context_dim and context:
        turns = encoder.encode([_clean_question(c) for c in context if c and c.strip()][-CONTEXT_TURNS:])
        if len(turns):
            ctx, lengths = torch.from_numpy(turns[None, :, :]), torch.tensor([len(turns)])
    if scorer is not None and ctx is None:
        probs_a, score = scorer(np.asarray(vector, dtype=np.float32))
        probs = probs_a.tolist()
    else:
        with torch.inference_mode():
            probs_t, score_t = model.route_scores(torch.from_numpy(np.asarray(vector, dtype=np.float32)[None, :]), ctx, lengths)
        probs, score = probs_t[0].tolist(), float(score_t[0])
    live = set(active_experts().values_list("slug", flat=True))
    raw = {slug: p for slug, p in zip(version.experts, probs, strict=True) if slug in live}
    if not raw:
        raise RoutingUnavailable("none of the router's experts is active")
    decided = arbiter.decide(raw, top_k=int(top_k), score=score)
    fallback = None
    if decided.abstained:
        fallback = active_experts().filter(is_fallback=True).order_by("slug").values_list("slug", flat=True).first()
    t2 = time.perf_counter()
    ranked = [{"slug": s, "score": round(a, 4)} for s, a in decided.ranked[: max(int(top_k), MAX_TOP_K)]]
    return Decision(
        experts=ranked, router_version=version.version, embed_ms=(t1 - t0) * 1000, route_ms=(t2 - t1) * 1000, vector=vector.tolist(),
        abstained=decided.abstained, failover=ranked[:MAX_TOP_K], raw_scores={s: round(p, 6) for s, p in raw.items()}, score=round(score, 6),
        fallback=fallback,
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


MODES = {"auto": 2, "auto:fast": 1}


def answer(question: str, model: str = "auto") -> ChatResult:
    """Route ``question``, retrieve from the chosen experts' collections and generate a cited answer.

    ``model`` is ``auto`` (top-2 experts, fused retrieval), ``auto:fast`` (top-1) or an expert's slug
    (the router is bypassed). When the router abstains the question goes to the fallback expert,
    or, without one, the answer says that no expert covers it (nothing is retrieved or generated).
    """
    from experts.models import Expert

    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    abstained = fallback_used = False
    if model in MODES:
        decision = route(question, top_k=MODES[model])
        abstained = decision.abstained
        if abstained and decision.fallback:
            chosen_slugs, weights, fallback_used = [decision.fallback], [1.0], True
        else:
            chosen_slugs = [str(e["slug"]) for e in decision.experts[: MODES[model]]]
            weights = [float(decision.raw_scores.get(s, 0.0)) for s in chosen_slugs]
    else:
        question = _clean_question(question)
        t0 = time.perf_counter()
        vector = get_encoder().encode([question])[0]
        decision = Decision(experts=[{"slug": model, "score": 1.0}], router_version=None, embed_ms=(time.perf_counter() - t0) * 1000, route_ms=0.0, vector=vector.tolist())
        chosen_slugs, weights = [model], [1.0]
    if abstained and not fallback_used:
        timings = {"embed_ms": decision.embed_ms, "route_ms": decision.route_ms, "retrieve_ms": 0.0, "generate_ms": 0.0}
        timings["total_ms"] = sum(timings.values())
        result = ChatResult(
            answer=NO_EXPERT_ANSWER, expert="", decision=decision, citations=[], passages=[], grounded=False, mode=model,
            timings=timings, request_id=request_id, abstained=True,
        )
        log_event(result, question)
        return result
    experts = {e.slug: e for e in Expert.objects.filter(slug__in=chosen_slugs)}
    chosen = [experts[s] for s in chosen_slugs if s in experts]
    t0 = time.perf_counter()
    hits = knowledge.search_experts(chosen, question, limit=settings.RETRIEVAL_TOP_K, weights=weights, query_vector=decision.vector)
    t1 = time.perf_counter()
    passages = [
        Passage(text=h.payload.get("text", ""), title=h.payload.get("title", ""), url=h.payload.get("url", ""), score=h.dense_score,
                expert=h.payload.get("expert", ""), document_id=h.payload.get("document_id"), chunk_id=h.id)
        for h in hits
    ]
    answering = passages[0].expert if passages else (chosen_slugs[0] if chosen_slugs else "")
    generated = get_generator().generate(GenerationRequest(question=question, expert=answering, passages=passages))
    t2 = time.perf_counter()
    timings = {"embed_ms": decision.embed_ms, "route_ms": decision.route_ms, "retrieve_ms": (t1 - t0) * 1000, "generate_ms": (t2 - t1) * 1000}
    timings["total_ms"] = sum(timings.values())
    result = ChatResult(
        answer=generated.text, expert=answering, decision=decision, grounded=generated.grounded, mode=model,
        citations=[_passage_dict(p, i) for i, p in enumerate(generated.citations, start=1)],
        passages=[_passage_dict(p, i) for i, p in enumerate(passages, start=1)], timings=timings, request_id=request_id,
        abstained=abstained, fallback_used=fallback_used,
    )
    log_event(result, question)
    return result


def _passage_dict(p: Passage, index: int) -> dict[str, Any]:
    d = asdict(p)
    d["index"] = index
    d["score"] = round(float(d["score"]), 4)
    return d


def log_event(result: ChatResult, question: str, status_code: int = 200) -> RoutingEvent:
    """Store the routing decision (no question text: only its length)."""
    t = result.timings
    return RoutingEvent.objects.create(
        request_id=result.request_id, mode=result.mode, router_version=result.decision.router_version, expert=result.expert,
        experts=result.decision.experts, question_chars=len(question), grounded=result.grounded,
        abstained=result.abstained, fallback_used=result.fallback_used,
        embed_ms=t["embed_ms"], route_ms=t["route_ms"], retrieve_ms=t["retrieve_ms"], generate_ms=t["generate_ms"],
        total_ms=t["total_ms"], status_code=status_code,
    )
