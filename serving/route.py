"""Routing one question: the active router (cached per process), its arbiter, and the ranked decision.

The first step of every chat request (``serving.chat``) and of ``POST /api/v1/route``.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from django.conf import settings

from encoders import EncoderUnavailable, embedding_space, encode_later, get_encoder, model_name, resolve_model_path
from experts.selectors import active_expert_slugs, clear_serving_caches, experts_by_slug, fallback_slugs, serving_cached  # noqa: F401  (clear_serving_caches: for serving.apps)
from routing.ml import conversation as conversation_rule
from routing.ml.arbiter import MAX_TOP_K, Arbiter, LoadWindow
from routing.ml.textrouter import TextRouter
from routing.ml.training import CONTEXT_TURNS
from routing.models import RouterVersion

logger = logging.getLogger(__name__)


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
OTHER_LANGUAGE_ANSWER = "No expert can answer this question: it is not in the language of the experts' documents."
# Why no expert answers (the API's ``refusal``): the router placed the question with none of them, or its language is
# not the documents' (``Decision.foreign``).
OUT_OF_SCOPE, OTHER_LANGUAGE = "out_of_scope", "other_language"

_router_cache: dict[str, Any] = {}
# RouterVersion pk -> the encoder's embedding space, for versions trained in another one (set as a version loads)
_other_space: dict[int, str] = {}
_router_lock = threading.Lock()


def _arbiter_for(version: RouterVersion) -> Arbiter:
    threshold = (version.metrics or {}).get("abstain_threshold")
    return Arbiter(
        window=LoadWindow(settings.ROUTER_LOAD_WINDOW),
        load_penalty=settings.ROUTER_LOAD_PENALTY,
        capacity=settings.ROUTER_CAPACITY,
        abstain_threshold=None if threshold is None else float(threshold),
    )


def _router_version(key: str, number: int | None) -> RouterVersion | None:
    """The active RouterVersion (or version ``number``), kept with the serving caches for SERVING_CACHE_TTL_S seconds
    (``clear_serving_caches`` forgets it with the experts' rows)."""

    def load() -> RouterVersion | None:
        query = RouterVersion.objects.filter(is_active=True) if number is None else RouterVersion.objects.filter(version=number)
        return query.first()

    return serving_cached(("router-version", key), load)


def _active_router(number: int | None = None) -> tuple[RouterVersion, TextRouter, Arbiter]:
    """The active version (or version ``number``, for an experiment arm), its router and arbiter, loaded once per process."""
    key = "active" if number is None else f"v{number}"
    version = _router_version(key, number)
    if version is None:
        if number is None:
            raise RoutingUnavailable("no router has been trained yet; train one in the console or run the demo")
        raise RoutingUnavailable(f"router v{number} (named by an experiment arm) does not exist")
    with _router_lock:
        cached = _router_cache.get(key)
        if cached is None or _identity(cached[0]) != _identity(version):
            cached = (version, TextRouter.load(version.path, tokenizer_file=fast_tokenizer_file()), _arbiter_for(version))
            _router_cache[key] = cached
            space = embedding_space()
            _other_space.pop(version.pk, None)
            if version.embedding_model != space:  # once per process and version: the Training page says it too
                # Only the backend changed (same model, e.g. onnx -> onnx-int8): the fast tier's encoder, a
                # table over that model's word pieces, is as it was trained and routes instead.
                fast_routes = cached[1].fast is not None and model_name(version.embedding_model) == model_name(space)
                if fast_routes:
                    _other_space[version.pk] = space
                logger.warning("routing.router.other_embedding_space",
                               extra={"router_version": version.version, "trained_on": version.embedding_model, "encoder": space,
                                      "action": "train the router again: its routes do not fit the encoder's vectors",
                                      "routed_with": "fast tier" if fast_routes else "the router as it is"})
    return cached


def _identity(version: RouterVersion) -> tuple[Any, ...]:
    """What tells a loaded router from another: a restored or recreated database may reuse a version's row id and folder."""
    return version.pk, version.path, version.created_at, tuple(version.experts)


def warm_up() -> bool:
    """Load in this process what a first question would: the active router, and its experts' documents'
    evidence and word tables where it reads them (``knowledge.vocabulary.distinct_words``: every expert's
    documents read once). Routes one made-up question, whose choice the load window then forgets.
    False where there is no router to load yet.
    """
    try:
        route("warm-up: how do I get started?")
    except RoutingUnavailable:
        return False
    reset_load_window()
    return True


def fast_tokenizer_file() -> Path | None:
    """The full encoder's tokenizer, which a fast tier's encoder reads (it may have moved since training: a new install)."""
    try:
        found = Path(resolve_model_path(settings.EMBEDDING_MODEL)) / "tokenizer.json"
    except ValueError:
        return None
    return found if found.exists() else None


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
    like nothing the router was trained on (``score`` below the version's abstain ``threshold``)
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
    # The earlier turns' embeddings the router read (encoded here or given), for the search to read too; None: it read none.
    context_vectors: np.ndarray | None = field(default=None, repr=False, compare=False)
    threshold: float | None = None  # the router version's abstain threshold on ``score`` (None: it never abstains)
    views: dict[str, Any] = field(default_factory=dict)  # each view's best expert: "meaning" (embedding), "spelling" (characters), "spelling_weight", "examples" (nearest training questions)
    encoder: str = "full"  # "fast": the fast tier's distilled encoder and router answered (``auto:fast``); ``vector`` is its vector
    degraded: str = ""  # why the fast tier routed a request that asked for the full router (the sentence encoder failed, another embedding space)
    # An unsure follow-up ranked with its conversation (``routing.ml.conversation``): {"earlier_turns", "question_alone": {"expert",
    # "probability"}, "weight", and "ruled_out": {"expert", "probability_alone"} where the conversation pointed to an expert the
    # question alone rules out (``routing.ml.conversation.PLAUSIBLE``)}; None: the question was ranked alone.
    conversation: dict[str, Any] | None = None
    # The question's words are too few of the experts' documents' to be in their language (``_shares_language``): refused.
    foreign: bool = False


def clean_question(question: str) -> str:
    text = (question or "").strip()
    if not text:
        raise InvalidQuestion("the question is empty")
    # The encoder reads at most 256 tokens; longer texts are cut here so a 50,000-character paste
    # costs no more than a long question.
    return text[: int(settings.MAX_QUESTION_CHARS)]


def route(
    question: str, top_k: int | None = None, context: list[str] | None = None, *,
    context_vectors: np.ndarray | None = None, router_version: int | None = None, allowed: set[str] | None = None, fast: bool = False,
) -> Decision:
    """Rank the active experts for ``question`` with the active router.

    Args:
        question: the user's question (stripped; cut to ``MAX_QUESTION_CHARS`` characters).
        top_k: experts to choose, 1-3 (default ``ROUTER_TOP_K``).
        context: earlier user turns of the conversation, oldest first: read by routers trained
            with a context path; for the others, when they are unsure of the question alone, the
            question is ranked blended with them (``routing.ml.conversation``; its in-scope score,
            and so abstention, still reads the question alone).
        context_vectors: the same as embeddings already computed (a stored conversation); used
            when ``context`` is empty.
        router_version: route with this RouterVersion.version instead of the active one (an
            experiment arm).
        allowed: the only expert slugs to consider (an API key's scope); None: all of them.
        fast: route with the version's fast tier (its distilled encoder and its own router; no
            conversation context, no knowledge evidence) where it has one; else as usual.

    Raises:
        InvalidQuestion: an empty question or a top_k outside 1-3.
        RoutingUnavailable: no active router, or none of its experts is active.
        ExpertNotAllowed: ``allowed`` leaves none of the router's experts.
    """
    top_k = settings.ROUTER_TOP_K if top_k is None else top_k
    if not 1 <= int(top_k) <= MAX_TOP_K:
        raise InvalidQuestion(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
    question = clean_question(question)
    version, router, arbiter = _active_router(router_version)
    foreign = not _shares_language(version, question)
    if fast and router.fast is not None:
        return _route_fast(version, router, arbiter, question, int(top_k), allowed, foreign=foreign)
    if router.fast is not None and (space := _other_space.get(version.pk)) is not None:
        # The network and its prototypes read another backend's vectors; the fast tier reads its own
        # encoder's, which did not change: it routes until the router is trained again.
        return _route_fast(version, router, arbiter, question, int(top_k), allowed, foreign=foreign,
                           degraded=f"router trained on {version.embedding_model} vectors, the encoder now makes {space}: routed with the fast tier"[:200])
    t0 = time.perf_counter()
    encoder = get_encoder()
    try:
        pending = encode_later(encoder, [question])
        # While the encoder child (or the batcher thread) makes the vector, this thread reads the
        # question's words: the character view needs no embedding. ``embed_ms`` runs to the vector.
        char_logits = router.read_text(question)
        vector = pending()[0]
    except EncoderUnavailable as exc:
        # The sentence encoder's process died and could not be restarted: the fast tier still routes.
        if router.fast is None:
            raise RoutingUnavailable(f"the sentence encoder is unavailable ({exc}) and this router has no fast tier to route with") from exc
        logger.warning("routing.encoder_unavailable", extra={"error": str(exc)[:200], "routed_with": "fast tier"})
        return _route_fast(version, router, arbiter, question, int(top_k), allowed, foreign=foreign,
                           degraded=f"sentence encoder unavailable: {exc}"[:200])
    t1 = time.perf_counter()
    ctx, lengths = None, None
    read: np.ndarray | None = None  # the earlier turns' embeddings the router read, if it read any
    if router.context_dim:
        texts = [c for c in (context or []) if c and c.strip()]
        turns = encoder.encode([clean_question(c) for c in texts][-CONTEXT_TURNS:]) if texts else context_vectors
        if turns is not None and len(turns):
            read = np.asarray(turns, dtype=np.float32)[-CONTEXT_TURNS:]
            ctx, lengths = torch.from_numpy(read[None, :, :]), torch.tensor([len(read)])
    scored = router.explain_one(vector, question, ctx, lengths, char_logits=char_logits)
    probs, score, threshold, evidence = scored.probs, scored.score, arbiter.abstain_threshold, None
    knowledge = router.knowledge is not None and settings.ROUTER_KNOWLEDGE
    if knowledge:
        probs, score, threshold, evidence = _with_knowledge(version, router, vector, question, probs, score, threshold)
    conversation = None
    if not router.context_dim and (threshold is None or score >= threshold):
        # An unsure follow-up is ranked with its conversation (routing.ml.conversation); abstention read the question alone.
        blended = _with_conversation(version, router, vector, question, probs, context, context_vectors, knowledge, char_logits)
        if blended is not None:
            scored, probs, evidence, read, conversation = blended
    raw, decided, fallback = _decide(version, arbiter, probs, score, threshold, int(top_k), allowed, foreign)
    return _decision(version, raw, decided, fallback, int(top_k), vector, score, threshold, t0, t1, foreign=foreign,
                     context_turns=0 if read is None else len(read), views=_views(version.experts, scored, router.weight, set(raw), evidence),
                     context_vectors=read, conversation=conversation)


def _with_conversation(version: RouterVersion, router: TextRouter, vector: np.ndarray, question: str, probs: np.ndarray,
                       context: list[str] | None, context_vectors: np.ndarray | None, knowledge: bool,
                       char_logits: np.ndarray | None = None) -> tuple[Any, ...] | None:
    """The ranking of a follow-up the router is unsure of alone, read with the conversation's earlier turns.

    Returns (scored, probabilities, knowledge evidence, the turns' embeddings, what the question alone
    said), or None: no conversation, the rule is off (``routing.ml.conversation.CONTEXT_WEIGHT`` 0), the router is
    sure of the question alone, or the turns cannot be encoded (the question's ranking stands).
    """
    weight, below = conversation_rule.CONTEXT_WEIGHT, conversation_rule.CONTEXT_BELOW
    texts = [clean_question(c) for c in (context or []) if c and c.strip()][-CONTEXT_TURNS:]
    if weight <= 0 or not (texts or (context_vectors is not None and len(context_vectors))) or not conversation_rule.unsure(probs, below):
        return None
    if texts:
        try:
            turns = np.asarray(get_encoder().encode(texts), dtype=np.float32)
        except EncoderUnavailable as exc:
            logger.warning("routing.context_unencoded", extra={"error": str(exc)[:200]})
            return None
    else:
        turns = np.asarray(context_vectors, dtype=np.float32)[-CONTEXT_TURNS:]
    mixed = conversation_rule.blend(vector, turns, weight)
    scored = router.explain_one(mixed, question, char_logits=char_logits)
    blended, evidence = scored.probs, None
    if knowledge:
        blended, _, _, evidence = _with_knowledge(version, router, mixed, question, blended, scored.score, None)
    pointed = int(np.argmax(blended))
    blended = conversation_rule.within_question(blended, probs)
    best = int(np.argmax(probs))
    alone = {"expert": version.experts[best], "probability": round(float(probs[best]), 4)}
    said = {"earlier_turns": len(turns), "question_alone": alone, "weight": weight}
    if int(np.argmax(blended)) != pointed:
        # The conversation's favourite is one the question alone rules out: it only broke the tie among the others.
        said["ruled_out"] = {"expert": version.experts[pointed], "probability_alone": round(float(probs[pointed]), 4)}
    return scored, blended, evidence, turns, said


def earlier_expert(texts: list[str], vectors: np.ndarray | None = None, *, router_version: int | None = None,
                   allowed: set[str] | None = None) -> tuple[str | None, np.ndarray]:
    """The expert a conversation's earlier user questions route to together, and their embeddings.

    For a request that sends its conversation's messages instead of a stored conversation's id,
    this expert stands in for the one a stored conversation keeps (``serving.chat``): the router
    reads the questions' mean embedding and their words (``routing.ml.conversation.earlier_vector``,
    with the documents' evidence where the router has it). None where it abstains on them or none
    of its live experts is allowed. ``vectors``: the questions' embeddings if the caller has them.
    """
    version, router, arbiter = _active_router(router_version)
    turns = np.asarray(get_encoder().encode(texts) if vectors is None else vectors, dtype=np.float32)
    if not len(turns):
        return None, turns
    mean, words = conversation_rule.earlier_vector(turns), " ".join(texts)
    scored = router.explain_one(mean, words)
    probs, score, threshold = scored.probs, scored.score, arbiter.abstain_threshold
    if router.knowledge is not None and settings.ROUTER_KNOWLEDGE:
        probs, score, threshold, _ = _with_knowledge(version, router, mean, words, probs, score, threshold)
    if threshold is not None and score < threshold:
        return None, turns
    live = active_expert_slugs()
    reachable = [(float(p), slug) for slug, p in zip(version.experts, probs.tolist(), strict=True) if slug in live and (allowed is None or slug in allowed)]
    return (max(reachable)[1] if reachable else None), turns


def _shares_language(version: RouterVersion, question: str) -> bool:
    """Whether ``question`` is in the language of the router's live experts' documents (``knowledge.ml.spelling.KNOWN_WORDS_MIN``).

    A question in another language would be answered with whichever sentence its names and numbers match, so it is
    refused instead, the fallback expert included. Experts with few documents say nothing: the question passes.
    """
    from knowledge.vocabulary import vocabulary

    live = active_expert_slugs()
    return vocabulary(list(experts_by_slug([s for s in version.experts if s in live]).values())).shares_language(question)


def _decision(version: RouterVersion, raw: dict[str, float], decided: Any, fallback: str | None, top_k: int, vector: np.ndarray, score: float,
              threshold: float | None, t0: float, t1: float, **rest: Any) -> Decision:
    """The ``Decision`` of an arbitrated request (``t0``: before encoding, ``t1``: after; route time runs to now)."""
    ranked = [{"slug": s, "score": round(a, 4)} for s, a in decided.ranked[: max(top_k, MAX_TOP_K)]]
    return Decision(
        experts=ranked, router_version=version.version, embed_ms=(t1 - t0) * 1000, route_ms=(time.perf_counter() - t1) * 1000,
        vector=vector.tolist(), abstained=decided.abstained, failover=ranked[:MAX_TOP_K], raw_scores={s: round(p, 6) for s, p in raw.items()},
        score=round(score, 6), fallback=fallback, threshold=threshold, **rest,
    )


def _decide(version: RouterVersion, arbiter: Arbiter, probs: np.ndarray, score: float, threshold: float | None, top_k: int,
            allowed: set[str] | None, foreign: bool = False) -> tuple[dict[str, float], Any, str | None]:
    """The live, allowed experts' probabilities, the arbiter's decision, and the fallback expert when it abstained
    (none for a ``foreign`` question: no expert's documents share its language, the fallback's neither)."""
    live = active_expert_slugs()
    raw = {slug: p for slug, p in zip(version.experts, probs.tolist(), strict=True) if slug in live}
    if not raw:
        raise RoutingUnavailable("none of the router's experts is active")
    if allowed is not None:
        raw = {slug: p for slug, p in raw.items() if slug in allowed}
        if not raw:
            raise ExpertNotAllowed("you may not ask any of the router's experts: sign in, use an API key, or ask a team to make an expert public")
    decided = arbiter.decide(raw, top_k=top_k, score=score, threshold=math.inf if foreign else threshold)
    fallback = None
    if decided.abstained and not foreign:
        fallback = next((s for s in fallback_slugs() if allowed is None or s in allowed), None)
    return raw, decided, fallback


def _route_fast(version: RouterVersion, router: TextRouter, arbiter: Arbiter, question: str, top_k: int, allowed: set[str] | None,
                degraded: str = "", foreign: bool = False) -> Decision:
    """``route`` through the fast tier: its encoder (~0.07 ms), its router and its own abstain threshold."""
    fast = router.fast
    assert fast is not None
    t0 = time.perf_counter()
    vector = fast.encoder.encode([question])[0]
    t1 = time.perf_counter()
    scored = fast.router.explain_one(vector, question)
    threshold = ((version.metrics or {}).get("fast_tier") or {}).get("abstain_threshold", arbiter.abstain_threshold)
    raw, decided, fallback = _decide(version, arbiter, scored.probs, scored.score, threshold, top_k, allowed, foreign)
    return _decision(version, raw, decided, fallback, top_k, vector, scored.score, threshold, t0, t1, foreign=foreign,
                     views=_views(version.experts, scored, fast.router.weight, set(raw)), encoder="fast", degraded=degraded)


def _with_knowledge(version: RouterVersion, router: TextRouter, vector: np.ndarray, question: str, probs: np.ndarray, score: float,
                    threshold: float | None) -> tuple[np.ndarray, float, float | None, dict[str, Any] | None]:
    """The router's probabilities and in-scope score with the candidates' evidence in their own collections.

    Returns (probabilities, score, abstain threshold, evidence by expert). When the vector store
    cannot be read, the router's own figures and threshold, and ``{"unavailable": reason}``.
    """
    from knowledge.evidence import evidence_lookup
    from knowledge.stores import StoreUnavailable
    from knowledge.vocabulary import distinct_words
    from routing.ml.knowledge import evidence_one

    combiner = router.knowledge
    experts = list(version.experts)
    try:
        cand, dense, keywords = evidence_one(evidence_lookup(experts), probs, vector, question, combiner.candidates)
    except StoreUnavailable as exc:
        logger.warning("routing.knowledge.unavailable", extra={"error": str(exc)[:200]})
        return probs, score, threshold, {"unavailable": str(exc)[:200]}
    claim = distinct_words(experts).strongest(question) if combiner.word_scale else None
    combined, combined_score = combiner.combine_one(probs, score, cand, dense, keywords, claim[2] if claim is not None else 0.0)
    known = (version.metrics or {}).get("knowledge") or {}
    evidence: dict[str, Any] = {
        experts[j]: {"best_match": _rounded(d, 3), "keyword_score": _rounded(k, 2)}
        for j, d, k in zip(cand, dense.tolist(), keywords.tolist(), strict=True)
    }
    if claim is not None:
        # The word that counted towards the in-scope score, and whose documents use it (shown even where that expert is no candidate).
        word, owner, value = claim
        evidence.setdefault(experts[owner], {}).update({"word": word, "jargon": round(value, 2)})
    return combined, combined_score, known.get("abstain_threshold", threshold), evidence


def _rounded(value: float, digits: int) -> float | None:
    return None if np.isnan(value) else round(float(value), digits)


def _views(experts: list[str], scored: Any, weight: float, reachable: set[str], evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each view's favourite among the experts this request may reach, with its probability, and the knowledge evidence."""
    def favourite(values: np.ndarray) -> tuple[float, str]:
        return max((float(v), slug) for slug, v in zip(experts, values.tolist(), strict=True) if slug in reachable)

    def best(probs: np.ndarray | None) -> dict[str, Any] | None:
        if probs is None:
            return None
        p, slug = favourite(probs)
        return {"expert": slug, "probability": round(p, 4)}

    views: dict[str, Any] = {}
    if scored.spelling is not None:
        views = {"meaning": best(scored.meaning), "spelling": best(scored.spelling), "spelling_weight": weight}
    if scored.examples is not None:
        # The nearest training questions' favourite, by its mean cosine (routing.ml.nearest).
        c, slug = favourite(scored.examples)
        views["examples"] = {"expert": slug, "similarity": round(c, 4)}
    if evidence is not None:
        # Only the experts this request may reach: a key scoped to some experts learns nothing of the others' documents.
        views["knowledge"] = {slug: e for slug, e in evidence.items() if slug in reachable} if "unavailable" not in evidence else evidence
    return views
