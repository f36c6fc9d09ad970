"""Answering a chat turn end to end: route, retrieve from the chosen experts' collections, generate with
failover, stream, and record the decision.

Long because the turn's steps share one state (decision, passages, source, stream, timings) that
the failover loop, the streamed and whole answers and the event record all read.

Who writes the answer (``answer_source``): "model" (the configured language model, with the expert's
adapter when it has one), "extractive" (``GENERATOR=extractive``: cited sentences, no model),
"extractive_fallback" (the model failed, ran out of time or has its breaker open: the extractive
answer from the same passages, ``fallback_reason`` says why), "not_found" (no passage was strong
enough to show a model) or "none" (no expert covers the question). A broken adapter is replaced by
the expert's previous active version's adapter, else the bare base model (``adapter`` and
``expert_version`` say which answered, ``fallback_reason`` why). A model's answer may come from the
answer cache (``serving.answer_cache``; ``cached_question`` names the question it was written for).
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings

from experts.generation import (
    AdapterError,
    AdapterRef,
    GenerationBusy,
    GenerationError,
    GenerationRequest,
    get_fallback_generator,
    get_generator,
)
from experts.ml.extractive import NOT_FOUND, Answer, Passage
from experts.models import Expert, ExpertVersion
from experts.selectors import experts_by_slug, serving_version
from knowledge import services as knowledge
from knowledge.stores import StoreUnavailable
from routing.experiments.assignment import ArmAssignment, assign
from routing.ml import conversation as conversation_rule
from sbcommon.encoders import EncoderUnavailable, get_encoder

from . import answer_cache, conversations, events, traces
from .route import (
    NO_EXPERT_ANSWER,
    AllExpertsDown,
    Decision,
    ExpertNotAllowed,
    RoutingUnavailable,
    StreamInterrupted,
    clean_question,
    earlier_expert,
    route,
)

if TYPE_CHECKING:
    import numpy as np

logger = logging.getLogger(__name__)

# Why a follow-up's earlier turns were left out of its search (``ChatTurn._search_context``): the router
# placed the question itself with no expert (its in-scope score reads the question alone).
CHANGED_SUBJECT = "question_out_of_scope"


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
    answer_source: str = ""
    fallback_reason: str = ""
    adapter: str | None = None
    finish_reason: str = "stop"
    spelling: dict[str, Any] | None = None  # {"searched_for", "corrections"} when misspelt words were corrected for the search
    earlier_turns_searched: int = 0  # the user's earlier turns the search read beside the question (``knowledge.ml.conversation``)
    earlier_turns_left_out: int = 0  # earlier turns the search did not read: the router placed the question with no expert (a change of subject)
    selection: dict[str, Any] | None = None  # an extractive answer's choice of sentence (experts.ml.extractive.Answer.selection)
    # The conversation's expert (``sticky``: the answer stayed with it) and where it came from: "stored" (a stored
    # conversation's) or "earlier_questions" (the one a request's earlier messages route to, ``_earlier_expert``).
    conversation_expert: str = ""
    conversation_expert_from: str = ""


@dataclass
class Source:
    """Who wrote one expert's answer: ``answer_source`` (see the module), why a fallback, the adapter and version used."""

    answer_source: str = ""
    fallback_reason: str = ""
    adapter: str | None = None
    expert_version: int | None = None
    citation_format: str = "[{index}]"
    cached_question: str = ""  # the answer came from the answer cache, written for this question


# model name → how many experts: ``auto`` fuses the top 2's passages into one answer, ``auto:fast``
# asks the top 1, ``auto:accurate`` lets each of the top 2 answer from its own passages and merges.
MODES = {"auto": 2, "auto:fast": 1, "auto:accurate": 2}


@dataclass
class ChatRequest:
    """One chat turn as the API received it.

    ``history`` holds the earlier messages of the request ([{"role", "content"}], oldest first),
    ``allowed`` the expert slugs the caller may ask (``experts.access.askable_slugs``; None, for
    in-process callers such as the evaluations: every expert), ``user`` OpenAI's end-user field (the
    experiment subject when there is no conversation id), ``api_key_id`` and ``user_id`` who asks
    (the conversation and the response belong to them).
    """

    question: str
    model: str = "auto"
    history: list[dict[str, str]] = field(default_factory=list)
    conversation_id: str = ""
    user: str = ""
    api_key_id: int | None = None
    user_id: int | None = None
    allowed: set[str] | None = None
    max_tokens: int | None = None
    temperature: float = 0.0

    @property
    def earlier_questions(self) -> list[str]:
        """The user's earlier messages in ``history`` (never the assistant's), oldest first, blank ones left out."""
        return [m["content"] for m in self.history if m.get("role") == "user" and m.get("content", "").strip()]


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


def _previous_adapter(slug: str, version: ExpertVersion | None) -> tuple[ExpertVersion, AdapterRef] | None:
    """The adapter of the version that was active before ``version`` (the most recently activated other one), if any."""
    earlier = ExpertVersion.objects.filter(expert__slug=slug, activated_at__isnull=False).exclude(adapter_path="")
    if version is not None:
        earlier = earlier.exclude(pk=version.pk).exclude(adapter_path=version.adapter_path)
    previous = earlier.select_related("expert").order_by("-activated_at").first()
    if previous is None:
        return None
    return previous, AdapterRef(expert=slug, name=previous.adapter_name, path=previous.adapter_path, base_model=previous.base_model,
                                version=previous.version)


def _source(payload: dict[str, Any]) -> str:
    """What a reader calls a passage's document: its title, else its file name or id."""
    for key in ("source", "title", "external_id", "file_name"):
        if payload.get(key):
            return str(payload[key])
    return f"document {payload['document_id']}" if payload.get("document_id") is not None else ""


def _to_passages(hits: list[Any]) -> list[Passage]:
    return [
        Passage(text=h.payload.get("text", ""), title=h.payload.get("title", ""), url=h.payload.get("url", ""), score=h.dense_score,
                expert=h.payload.get("expert", ""), document_id=h.payload.get("document_id"), chunk_id=h.id, source=_source(h.payload),
                sentence_vectors=knowledge.sentence_vector_reader(h.payload))
        for h in hits
    ]


def _is_extractive(generator: Any) -> bool:
    """Whether the configured backend is the extractive one (then there is nothing to fall back to)."""
    return getattr(generator, "name", "") == "extractive"


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
    whose circuit breaker is open, failing over on ``StoreUnavailable`` (and on ``GenerationError``
    when even the extractive answer failed), until one expert produced its first output. A model
    that fails answers extractively instead (``Source``). Errors there raise before any byte is sent.
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
        self._cache_key: str | None = None  # set when the model's answer may be cached
        self._t0 = time.perf_counter()
        self._stream: Iterator[str | Answer] | None = None
        self._first: str | Answer | None = None
        self._passages: list[Passage] = []
        self._parts: list[dict[str, Any]] = []
        self._streamed: list[str] = []
        self._answer_breaker: Any = None
        self.source = Source()
        self.question = ""
        self.search_question = ""  # the question as searched: spell-corrected against the searched experts' documents
        self.spelling: dict[str, Any] | None = None  # what was corrected, when anything was
        self.search_context: knowledge.SearchContext | None = None  # the earlier user turns the search read (``_search_context``)
        self.turns_left_out = 0  # earlier user turns left out of the search: the question changed the subject (``_search_context``)
        self._stored_turns: np.ndarray | None = None  # a stored conversation's earlier question embeddings, when routed with them
        self._earlier_vectors: np.ndarray | None = None  # the request's earlier questions' embeddings, once encoded (``_earlier_expert``)
        self.conversation_expert = ""  # the conversation's expert: stored, or the one its earlier questions route to
        self._conversation_expert_from = ""  # "stored" or "earlier_questions": where ``conversation_expert`` came from

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
        except GenerationBusy:
            self._record(503, "generation_busy")
            raise
        return self

    def _start(self, stream: bool) -> None:
        req = self.request
        question = clean_question(req.question)
        self.question = question
        self.conversation = conversations.resolve(req.conversation_id, req.api_key_id, req.user_id)
        if not req.earlier_questions:  # the request did not send the conversation: its stored question embeddings stand in
            self._stored_turns = conversations.decode_turns(self.conversation.turns or [])
        subject = req.conversation_id or (f"user:{req.user}" if req.user else "") or (f"key:{req.api_key_id}" if req.api_key_id else "")
        self.arm = assign(subject or self.conversation.conversation_id)
        if req.model in MODES:
            candidates = self._routed_candidates(question)
        else:
            if req.allowed is not None and req.model not in req.allowed:
                raise ExpertNotAllowed(f"you may not ask expert {req.model!r}")
            t0 = time.perf_counter()
            vector = get_encoder().encode([question])[0]
            self.decision = Decision(experts=[{"slug": req.model, "score": 1.0}], router_version=None, embed_ms=(time.perf_counter() - t0) * 1000,
                                     route_ms=0.0, vector=vector.tolist())
            candidates = [req.model]
        self.timings["embed_ms"], self.timings["route_ms"] = self.decision.embed_ms, self.decision.route_ms
        if not candidates:  # abstained without a fallback expert: say so, nothing retrieved or generated
            self._first = Answer(text=NO_EXPERT_ANSWER, citations=[], grounded=False)
            self.source = Source(answer_source="none")
            return
        if req.model == "auto:accurate" and len(candidates) > 1 and not self.abstained:
            self._first = self._accurate(candidates)
        else:
            self._first_output(candidates, width=MODES.get(req.model, 1), stream=stream)

    def _routed_candidates(self, question: str) -> list[str]:
        """Route (with the conversation as context), apply stickiness; the experts to try in order."""
        req, conv = self.request, self.conversation
        assert conv is not None
        earlier = req.earlier_questions
        self.decision = route(
            question, top_k=MODES[req.model], context=earlier or None, context_vectors=self._stored_turns,
            router_version=self.arm.router_version if self.arm else None, allowed=req.allowed, fast=req.model == "auto:fast",
        )
        d = self.decision
        self.conversation_expert = conv.expert or self._earlier_expert()
        self._conversation_expert_from = "" if not self.conversation_expert else "stored" if conv.expert else "earlier_questions"
        expert = self.conversation_expert
        if d.abstained:
            self.abstained = True
            if expert and (req.allowed is None or expert in req.allowed) and expert in d.raw_scores:
                self.sticky = True  # nothing is clearly better than the conversation's expert
                return [expert]
            if d.fallback:
                self.fallback_used = True
                return [d.fallback]
            return []
        ranked, self.sticky = conversations.sticky_order(d.failover, expert, conversation_rule.STICKY_MARGIN)
        return [str(e["slug"]) for e in ranked]

    def _earlier_expert(self) -> str:
        """A request that sends its conversation's messages has no stored expert: the one its earlier questions route to stands in.

        So a follow-up answers the same whether the client keeps the conversation or the platform
        does (``tools/measure_conversation_routing.py``: on doc2dial's validation follow-ups the
        expert that answers was right for 0.805 without it, 0.876 with it, 0.882 for stored
        conversations). Their embeddings are kept for the search. "" when there are none, the fast
        tier routed (it never waits for the sentence encoder), or the router abstains on them.
        """
        texts = [clean_question(q) for q in self.request.earlier_questions if q and q.strip()][-conversations.CONTEXT_TURNS :]
        d = self.decision
        if not texts or d is None or d.encoder == "fast":
            return ""
        try:
            slug, self._earlier_vectors = earlier_expert(texts, d.context_vectors, router_version=self.arm.router_version if self.arm else None,
                                                         allowed=self.request.allowed)
        except EncoderUnavailable as exc:
            logger.warning("chat.context_unencoded", extra={"error": str(exc)[:200], "request_id": self.request_id})
            return ""
        return slug or ""

    def _retrieve(self, slugs: list[str], weights: list[float] | None) -> list[Passage]:
        experts = experts_by_slug(slugs)
        chosen = [experts[s] for s in slugs if s in experts]
        t0 = time.perf_counter()
        try:
            fixed = knowledge.correct_spelling(chosen, self.question)
            self.search_question = fixed.text
            self.spelling = {"searched_for": fixed.text, "corrections": [list(c) for c in fixed.changes]} if fixed.changed else None
            # A corrected question is embedded again by the search; the router's vector is the question as written.
            # The fast tier's vector serves either way: its requests never wait for the sentence encoder.
            fast = self.decision is not None and self.decision.encoder == "fast"
            vector = self.decision.vector if self.decision and (fast or not fixed.changed) else None
            if self.search_context is None:
                self.search_context = self._search_context(fast)
            hits = knowledge.search_experts(chosen, fixed.text, limit=settings.RETRIEVAL_TOP_K, weights=weights,
                                            query_vector=vector, allowed=self.request.allowed, context=self.search_context)
        finally:
            self.timings["retrieve_ms"] += (time.perf_counter() - t0) * 1000
        return _to_passages(hits)

    def _search_context(self, fast: bool) -> knowledge.SearchContext | None:
        """The user's earlier turns for the search (``knowledge.ml.conversation``): the request's history, else the
        stored conversation's embeddings; their embeddings are the router's when it read them, else encoded here
        (one batch). The fast tier's vector lives in another space: its search reads the turns' words only.

        None when the router abstained: a question that looks like none of the experts' training questions
        on its own ("What's the weather tomorrow?" mid-way through a DMV conversation) changed the subject,
        and the conversation's words would find it passages it does not ask about (the in-scope score reads
        the question alone). It is searched as asked; ``turns_left_out`` says how many turns were left out.
        """
        weight = knowledge.context_weight()
        texts = [clean_question(q) for q in self.request.earlier_questions][-conversations.CONTEXT_TURNS :]
        if not weight or (not texts and self._stored_turns is None):
            return None
        if self.decision is not None and self.decision.abstained:
            stored = 0 if self._stored_turns is None else len(self._stored_turns[-conversations.CONTEXT_TURNS :])
            self.turns_left_out = len(texts) or stored
            return None
        vectors = None
        if not fast:
            if self.decision is not None and self.decision.context_vectors is not None:
                vectors = self.decision.context_vectors
            elif texts and self._earlier_vectors is not None:
                vectors = self._earlier_vectors  # encoded for the conversation's expert (``_earlier_expert``)
            elif texts:
                try:
                    vectors = get_encoder().encode(texts)
                except EncoderUnavailable as exc:  # the turns' words still count
                    logger.warning("chat.context_unencoded", extra={"error": str(exc)[:200], "request_id": self.request_id})
            elif self._stored_turns is not None:
                vectors = self._stored_turns[-conversations.CONTEXT_TURNS :]
        context = knowledge.SearchContext(turns=tuple(texts), vectors=vectors, weight=weight)
        return None if context.empty else context

    def _generation_request(self, slug: str, passages: list[Passage]) -> tuple[GenerationRequest, ExpertVersion | None]:
        version, adapter = _generation_settings(slug, self.arm)
        self.expert_version = version.version if version is not None else None
        request = GenerationRequest(
            question=self.question, search_question=self.search_question, expert=slug, passages=passages, history=list(self.request.history),
            system_prompt=version.system_prompt if version else "", citation_format=version.citation_format if version else "[{index}]",
            adapter=adapter, max_tokens=self.request.max_tokens, temperature=self.request.temperature,
            question_vector=self.decision.vector if self.decision and self.decision.encoder == "fast" else None,
        )
        return request, version

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
                    output, source, answer_breaker = self._answer_with(answering, passages, stream, gen_breaker)
                except GenerationError as exc:
                    self._fail(answering, exc.kind, gen_breaker)
                    failed.add(answering)
                    continue
                finally:
                    self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000
                self.expert, self._passages, self._first, self._answer_breaker = answering, passages, output, answer_breaker
                self.source, self.expert_version = source, source.expert_version
                if not stream:
                    answer_breaker.record_success()
                self.fallback_used = self.fallback_used or bool(self.failover_from)
                return
        raise AllExpertsDown(self.failover_from)

    def _answer_with(self, slug: str, passages: list[Passage], stream: bool, breaker: Any) -> tuple[str | Answer, Source, Any]:
        """One expert's first output, who wrote it, and the breaker its success or failure counts on.

        The extractive backend answers itself (its ``GenerationError`` fails the expert over). A
        model answers unless the passages are weak (``NOT_FOUND`` then, the model is not asked),
        its breaker (``<slug>:generation``) is open, or it fails: then the extractive answer from
        the same passages. ``GenerationBusy`` goes up to the caller (HTTP 503).
        """
        self._stream = None  # a stream left by an earlier candidate that failed is not this one's
        generator = get_generator()
        request, version = self._generation_request(slug, passages)
        number = version.version if version is not None else None
        fmt = request.citation_format
        if _is_extractive(generator):
            return self._open(generator, request, stream), Source("extractive", expert_version=number, citation_format=fmt), breaker
        if not passages or max(p.score for p in passages) < float(settings.EXTRACTIVE_MIN_SCORE):
            return Answer(text=NOT_FOUND, citations=[], grounded=False), Source("not_found", expert_version=number, citation_format=fmt), breaker
        model_breaker = _breaker(f"{slug}:generation")
        if not model_breaker.allow():
            return (*self._extractive(request, stream, "circuit_open", number), breaker)
        try:
            output, source = self._model_output(generator, request, version, stream)
        except GenerationError as exc:
            model_breaker.record_failure(exc.kind)
            logger.warning("chat.generation_fallback", extra={"expert": slug, "reason": exc.kind, "request_id": self.request_id})
            return (*self._extractive(request, stream, exc.kind, number), breaker)
        return output, source, model_breaker

    def _model_output(self, generator: Any, request: GenerationRequest, version: ExpertVersion | None, stream: bool) -> tuple[str | Answer, Source]:
        """The model's first output with the request's adapter, else the previous active version's, else none."""
        number = version.version if version is not None else None
        hit = self._cached_answer(request, number)
        if hit is not None:
            return hit
        options: list[tuple[GenerationRequest, int | None]] = [(request, number)]
        if request.adapter is not None:
            previous = _previous_adapter(request.expert, version)
            if previous is not None:
                older, adapter = previous
                options.append((replace(request, adapter=adapter, system_prompt=older.system_prompt, citation_format=older.citation_format),
                                older.version))
            options.append((replace(request, adapter=None), number))
        reason = ""
        for option, option_version in options:
            try:
                output = self._open(generator, option, stream)
            except AdapterError as exc:
                reason = exc.kind
                logger.warning("chat.adapter_unusable", extra={"expert": request.expert, "adapter": option.adapter.name if option.adapter else "",
                                                               "reason": exc.kind, "error": str(exc), "request_id": self.request_id})
                continue
            adapter = option.adapter.name if option.adapter is not None else None
            return output, Source("model", fallback_reason=reason, adapter=adapter, expert_version=option_version,
                                  citation_format=option.citation_format)
        raise GenerationError(f"no adapter of expert {request.expert!r} could be used ({reason})")

    def _cached_answer(self, request: GenerationRequest, number: int | None) -> tuple[Answer, Source] | None:
        """The model's cached answer to this very question, version and passages (a first question, greedy decoding only); else remember the key."""
        cache = answer_cache.get_cache()
        self._cache_key = None
        if not cache.enabled or self.request.history or self.search_context is not None or request.temperature:
            return None
        key = answer_cache.cache_key(request, number, self.request.allowed)
        cached = cache.lookup(key)
        if cached is None:
            self._cache_key = key
            return None
        names = {f.name for f in fields(Passage)} - {"sentence_vectors"}
        citations = [Passage(**{k: v for k, v in c.items() if k in names}) for c in cached.citations]
        return Answer(text=cached.text, citations=citations, grounded=True), Source(
            "model", adapter=request.adapter.name if request.adapter else None, expert_version=number, citation_format=request.citation_format,
            cached_question=cached.question)

    def _extractive(self, request: GenerationRequest, stream: bool, reason: str, version: int | None) -> tuple[str | Answer, Source]:
        """The extractive answer from the request's passages, standing in for the model (``reason``: why)."""
        output = self._open(get_fallback_generator(), replace(request, adapter=None), stream)
        return output, Source("extractive_fallback", fallback_reason=reason, expert_version=version, citation_format=request.citation_format)

    def _open(self, generator: Any, request: GenerationRequest, stream: bool) -> str | Answer:
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
        parts: list[tuple[str, str, Answer, str, list[Passage], Source]] = []
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
            t0 = time.perf_counter()
            try:
                output, source, answer_breaker = self._answer_with(slug, passages, False, breaker)
            except GenerationError as exc:
                self._fail(slug, exc.kind, breaker)
                continue
            finally:
                self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000
            answer_breaker.record_success()
            assert isinstance(output, Answer)
            parts.append((slug, names.get(slug, slug), output, source.citation_format, passages, source))
        if not parts:
            raise AllExpertsDown(self.failover_from)
        merged = merge_answers([p[:4] for p in parts])
        kept = [p for p in parts if p[2].grounded] or parts[:1]
        self._parts = [{"expert": p[0], "grounded": p[2].grounded, "citations": len(p[2].citations), "answer_source": p[5].answer_source,
                        "fallback_reason": p[5].fallback_reason, "adapter": p[5].adapter} for p in kept]
        self.expert = parts[0][0]
        self.source = parts[0][5]
        self.expert_version = self.source.expert_version  # the answering expert's version, for the event
        self._passages = [passage for p in parts for passage in p[4]]
        self.fallback_used = bool(self.failover_from)
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
            expert_version=self.expert_version, parts=self._parts, answer_source=self.source.answer_source,
            fallback_reason=self.source.fallback_reason, adapter=self.source.adapter, finish_reason=answer.finish_reason,
            spelling=self.spelling, selection=answer.selection,
            earlier_turns_searched=self.search_context.used_turns if self.search_context is not None else 0,
            earlier_turns_left_out=self.turns_left_out,
            conversation_expert=self.conversation_expert, conversation_expert_from=self._conversation_expert_from,
        )
        if status_code == 200 and self.expert and self.conversation is not None and self.decision is not None:
            conversations.save_turn(self.conversation, self.decision.vector, self.expert, self.request.api_key_id, self.request.user_id)
        if (status_code == 200 and self._cache_key is not None and answer.grounded
                and self.source.answer_source == "model" and not self.source.fallback_reason and answer.finish_reason == "stop"):
            answer_cache.get_cache().store(self._cache_key, answer_cache.Cached(
                getattr(self, "question", ""), answer.text, [_passage_dict(p, i) for i, p in enumerate(answer.citations, start=1)]))
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
        """The routing event of this request (once), through ``serving.events`` (batched off the hot path there)."""
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
            api_key_id=self.request.api_key_id, user_id=self.request.user_id, experiment_id=self.arm.experiment_id if self.arm else None, arm=self.arm.arm if self.arm else "",
            expert_version=self.expert_version, failover_from=list(self.failover_from),
            answer_source=self.source.answer_source, fallback_reason=self.source.fallback_reason[:200], trace=traces.build(d, r),
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


def open_stream(question: str, model: str = "auto", **request: Any) -> ChatTurn:
    """A started, streamed ``ChatTurn`` for ``question`` (iterate it for the text deltas; ``result`` at the end).

    Raises what ``answer`` raises, and ``GenerationBusy`` when the model's queue is full.
    """
    return ChatTurn(ChatRequest(question=question, model=model, **request)).start(stream=True)


def _passage_dict(p: Passage, index: int) -> dict[str, Any]:
    """A citation as the API shows it: the passage's fields, less its sentence vectors."""
    d = {f.name: getattr(p, f.name) for f in fields(p) if f.name != "sentence_vectors"}
    d["index"] = index
    d["score"] = round(float(d["score"]), 4)
    return d
