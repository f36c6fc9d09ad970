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

from .ml.router import RouterNet
from .ml.training import TrainConfig, predict_proba, train_router
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
        cut = max(1, int(round(len(idx) * val_share)))
        val.extend(idx[:cut])
        train.extend(idx[cut:])
    return train, val


def train_router_from_labels(params: dict[str, Any] | None = None, reporter: JobReporter | None = None, job_id: int | None = None) -> RouterVersion:
    """Train a router on the latest promoted clustering run and activate it.

    If the active router was trained on exactly the same data and parameters, it is kept as is.
    """
    reporter = reporter or JobReporter()
    params = dict(params or {})
    run = labeling_selectors.latest_promoted_run()
    if run is None:
        raise JobFailed("no promoted clustering run: promote proposals to experts first")
    examples = [e for e in labeling_selectors.routing_examples(run) if e.split != "test"]
    experts = sorted({e.expert for e in examples})
    if len(experts) < 2:
        raise JobFailed("a router needs at least two experts with queries")
    fingerprint = hashlib.sha256(json.dumps([run.pk, [e.query_id for e in examples], experts, params, settings.EMBEDDING_MODEL], sort_keys=True).encode()).hexdigest()
    active = RouterVersion.objects.filter(is_active=True).first()
    if active is not None and active.data_fingerprint == fingerprint:
        reporter.log(f"router v{active.version} was trained on the same data; nothing to do")
        return active
    embed_missing(reporter=None)
    x = load_embeddings([e.query_id for e in examples], settings.EMBEDDING_MODEL)
    y = np.array([experts.index(e.expert) for e in examples])
    train_idx, val_idx = _split(examples, float(params.get("val_share", 0.15)), int(params.get("seed", 0)))
    reporter.progress(0.1, f"training on {len(train_idx)} queries, validating on {len(val_idx)}")
    config = TrainConfig(**{k: v for k, v in params.items() if k in TrainConfig.__dataclass_fields__})
    model_kwargs = {k: v for k, v in params.items() if k in RouterNet.config_keys and k not in ("input_dim", "n_experts")}
    result = train_router(x[train_idx], y[train_idx], x[val_idx], y[val_idx], len(experts), model_kwargs, config)
    reporter.progress(0.9, f"validation accuracy {result.metrics['val']['accuracy']:.3f}")
    return _save_version(result, experts, fingerprint, params, len(train_idx), len(val_idx), job_id)


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
            data_fingerprint=fingerprint, metrics=result.metrics, is_active=True,
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


_router_cache: dict[str, Any] = {}
_router_lock = threading.Lock()


def _active_router() -> tuple[RouterVersion, RouterNet]:
    version = RouterVersion.objects.filter(is_active=True).first()
    if version is None:
        raise RoutingUnavailable("no router has been trained yet; train one in the console or run the demo")
    with _router_lock:
        cached = _router_cache.get("active")
        if cached is None or cached[0].pk != version.pk:
            cached = (version, RouterNet.load(version.path))
            _router_cache["active"] = cached
    return cached


@dataclass
class Decision:
    """The router's ranked choice for one question."""

    experts: list[dict[str, float | str]]
    router_version: int | None
    embed_ms: float
    route_ms: float
    vector: list[float] = field(repr=False, default_factory=list)


def route(question: str, top_k: int | None = None) -> Decision:
    """Rank the active experts for ``question`` with the active router."""
    top_k = top_k or settings.ROUTER_TOP_K
    t0 = time.perf_counter()
    vector = get_encoder().encode([question])[0]
    t1 = time.perf_counter()
    version, model = _active_router()
    probs = predict_proba(model, vector[None, :])[0]
    live = set(active_experts().values_list("slug", flat=True))
    ranked = [(slug, float(p)) for slug, p in zip(version.experts, probs, strict=True) if slug in live]
    if not ranked:
        raise RoutingUnavailable("none of the router's experts is active")
    ranked.sort(key=lambda item: item[1], reverse=True)
    t2 = time.perf_counter()
    return Decision(
        experts=[{"slug": s, "score": round(p, 4)} for s, p in ranked[: max(top_k, 3)]],
        router_version=version.version, embed_ms=(t1 - t0) * 1000, route_ms=(t2 - t1) * 1000, vector=vector.tolist(),
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


MODES = {"auto": 2, "auto:fast": 1}


def answer(question: str, model: str = "auto") -> ChatResult:
    """Route ``question``, retrieve from the chosen experts' collections and generate a cited answer.

    ``model`` is ``auto`` (top-2 experts, fused retrieval), ``auto:fast`` (top-1) or an expert's slug
    (the router is bypassed).
    """
    from experts.models import Expert

    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    if model in MODES:
        decision = route(question)
        chosen_slugs = [str(e["slug"]) for e in decision.experts[: MODES[model]]]
        weights = [float(e["score"]) for e in decision.experts[: MODES[model]]]
    else:
        t0 = time.perf_counter()
        vector = get_encoder().encode([question])[0]
        decision = Decision(experts=[{"slug": model, "score": 1.0}], router_version=None, embed_ms=(time.perf_counter() - t0) * 1000, route_ms=0.0, vector=vector.tolist())
        chosen_slugs, weights = [model], [1.0]
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
        embed_ms=t["embed_ms"], route_ms=t["route_ms"], retrieve_ms=t["retrieve_ms"], generate_ms=t["generate_ms"],
        total_ms=t["total_ms"], status_code=status_code,
    )
