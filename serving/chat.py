"""Answering a chat turn end to end: route, retrieve from the chosen experts' collections, generate with
failover, stream, and record the decision.

``ChatTurn`` orchestrates; the failover loop is ``serving.failover``, ``auto:accurate``'s two answers
and their merge ``serving.accurate``, and one expert's answer and who wrote it (``answer_source``)
``serving.expert_answer``.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from django.conf import settings

from encoders import EncoderUnavailable, get_encoder
from experts.generation import GenerationBusy, GenerationError, GenerationRequest
from experts.ml.extractive import Answer, Passage
from experts.selectors import experts_by_slug
from knowledge import search as knowledge
from routing.experiments.assignment import ArmAssignment, assign
from routing.ml import conversation as conversation_rule

from . import accurate, answer_cache, breadth, conversations, events, failover, traces
from .expert_answer import Opened, Source, generation_settings, open_answer
from .route import (
    NO_EXPERT_ANSWER,
    OTHER_LANGUAGE,
    OTHER_LANGUAGE_ANSWER,
    OUT_OF_SCOPE,
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
    experts_answering: list[str] = field(default_factory=list)  # the experts whose parts make up the answer (two: a top-2 answer)
    asked: dict[str, str] = field(default_factory=dict)  # a question that asks two of two experts: the part each answered (``breadth.split_between``)
    clarify: list[dict[str, str]] = field(default_factory=list)  # the answer asks which of these experts ({"slug", "name"}) the user means
    choice: str = ""  # the expert the user chose in answer to a clarifying question (``serving.breadth.after_clarify``)
    refusal: str = ""  # why no expert answers: ``route.OUT_OF_SCOPE`` or ``route.OTHER_LANGUAGE`` ("" when one answers)


# model name → how many experts: ``auto`` fuses the top 2's passages into one answer (or, where both experts'
# documents hold the question, lets each answer its part; where they do not settle it, asks which one:
# ``serving.breadth``), ``auto:fast`` asks the top 1, ``auto:accurate`` lets each of the top 2 answer from
# its own passages and merges.
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


class ChatTurn:
    """One chat request through route → retrieve → generate with failover, streamed or not.

    ``start()`` does everything up to the first piece of the answer: it routes, picks the
    candidates (stickiness, experiment arm, key scope), and hands them to the failover loop
    (``serving.failover``, or ``serving.accurate`` for ``auto:accurate``), which walks them until one
    expert produced its first output (``serving.expert_answer``: a model that fails answers
    extractively instead). Errors there raise before any byte is sent.
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
        self._part_tokens: int | None = None  # each part's length where several experts answer (``serving.breadth.PART_WORDS``)
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
        self.clarify: list[dict[str, str]] = []  # a clarifying question's choices (``serving.breadth``)
        self.choice = ""  # the expert the user chose in answer to a clarifying question
        self._both = False  # both top experts answer their part (``serving.breadth.BOTH``)
        self.asked: dict[str, str] = {}  # where a question asks two of two experts, the part each answers (``breadth.split_between``)
        self.refusal = ""  # why no expert answers: OUT_OF_SCOPE or OTHER_LANGUAGE ("" when one answers)

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
        chosen = breadth.after_clarify(req.history, question, req.model)
        if chosen is not None:  # the reply to a clarifying question: its expert answers the question it asked about
            self.choice, question = chosen[0], clean_question(chosen[1])
        self.question = question
        self.conversation = conversations.resolve(req.conversation_id, req.api_key_id, req.user_id)
        polite = conversation_rule.courtesy(question)
        if polite:  # only thanks or goodbye: a polite reply, nothing routed, retrieved or generated
            self.decision = Decision(experts=[], router_version=None, embed_ms=0.0, route_ms=0.0)
            self._first = Answer(text=polite, citations=[], grounded=False)
            self.source = Source(answer_source="courtesy")
            return
        if not req.earlier_questions:  # the request did not send the conversation: its stored question embeddings stand in
            self._stored_turns = conversations.decode_turns(self.conversation.turns or [])
        subject = req.conversation_id or (f"user:{req.user}" if req.user else "") or (f"key:{req.api_key_id}" if req.api_key_id else "")
        self.arm = assign(subject or self.conversation.conversation_id)
        if req.model in MODES and not self.choice:
            candidates = self._routed_candidates(question)
        else:
            slug = self.choice or req.model
            if req.allowed is not None and slug not in req.allowed:
                raise ExpertNotAllowed(f"you may not ask expert {slug!r}")
            t0 = time.perf_counter()
            vector = get_encoder().encode([question])[0]
            self.decision = Decision(experts=[{"slug": slug, "score": 1.0}], router_version=None, embed_ms=(time.perf_counter() - t0) * 1000,
                                     route_ms=0.0, vector=vector.tolist())
            candidates = [slug]
        self.timings["embed_ms"], self.timings["route_ms"] = self.decision.embed_ms, self.decision.route_ms
        if self.clarify:  # a short question back, nothing retrieved or generated
            self._first = Answer(text=breadth.clarify_text(self.clarify), citations=[], grounded=False)
            self.source = Source(answer_source="clarify")
            return
        if not candidates:  # abstained without a fallback expert: say so, nothing retrieved or generated
            self._first = Answer(text=OTHER_LANGUAGE_ANSWER if self.refusal == OTHER_LANGUAGE else NO_EXPERT_ANSWER, citations=[], grounded=False)
            self.source = Source(answer_source="none")
            return
        if (req.model == "auto:accurate" or self._both) and len(candidates) > 1 and not self.abstained:
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
            if d.foreign:  # no expert's documents share the question's language: refused, the conversation's expert included
                self.refusal = OTHER_LANGUAGE
                return []
            if expert and (req.allowed is None or expert in req.allowed) and expert in d.raw_scores:
                self.sticky = True  # nothing is clearly better than the conversation's expert
                return [expert]
            if d.fallback:
                self.fallback_used = True
                return [d.fallback]
            self.refusal = OUT_OF_SCOPE
            return []
        ranked, self.sticky = conversations.sticky_order(d.failover, expert, conversation_rule.STICKY_MARGIN)
        if req.model == "auto" and not self.sticky:
            found = breadth.signals(d, question)
            how = breadth.decide(found, conversation=bool(earlier or expert or self._stored_turns is not None))
            self._both = how == breadth.BOTH
            if how == breadth.CLARIFY and found is not None:
                self.clarify = breadth.clarify_choices(found)
            if how != breadth.BOTH:  # a question that asks two, each of another expert: each answers its own
                self.asked = breadth.split_between(question, lambda part: route(
                    part, top_k=2, router_version=self.arm.router_version if self.arm else None, allowed=req.allowed)) or {}
                if self.asked:
                    self._both, self.clarify = True, []
                    ranked = [e for slug in self.asked for e in ranked if e["slug"] == slug] + [e for e in ranked if e["slug"] not in self.asked]
        return [str(e["slug"]) for e in ranked]

    def _earlier_expert(self) -> str:
        """A request that sends its conversation's messages has no stored expert: the one its earlier questions route to stands in.

        So a follow-up answers the same whether the client keeps the conversation or the platform
        does (on doc2dial's validation follow-ups the expert that answers was right for 0.805 without
        it, 0.876 with it; docs/EVALUATIONS.md). Their embeddings are kept for the search. "" when there are none, the fast
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
            fixed = knowledge.correct_spelling(chosen, self._asked_of(slugs))
            self.search_question = fixed.text
            self.spelling = {"searched_for": fixed.text, "corrections": [list(c) for c in fixed.changes]} if fixed.changed else None
            # A corrected question is embedded again by the search; the router's vector is the question as written.
            # The fast tier's vector serves either way: its requests never wait for the sentence encoder.
            fast = self.decision is not None and self.decision.encoder == "fast"
            # An expert's own part of a question that asks two is not what the router encoded: the search encodes it.
            own_part = self._asked_of(slugs) != self.question
            vector = self.decision.vector if self.decision and (fast or not fixed.changed) and not own_part else None
            if self.search_context is None:
                self.search_context = self._search_context(fast)
            hits = knowledge.search_experts(chosen, fixed.text, limit=settings.RETRIEVAL_TOP_K, weights=weights,
                                            query_vector=vector, allowed=self.request.allowed, context=self.search_context)
        finally:
            self.timings["retrieve_ms"] += (time.perf_counter() - t0) * 1000
        return _to_passages(hits)

    def _asked_of(self, slugs: list[str]) -> str:
        """What ``slugs`` are asked: the question, or one expert's own part of a question that asks two (``asked``)."""
        return self.asked.get(slugs[0], self.question) if len(slugs) == 1 else self.question

    def _search_context(self, fast: bool) -> knowledge.SearchContext | None:
        """The user's earlier turns for the search (``knowledge.ml.conversation``): the request's history, else the
        stored conversation's embeddings; their embeddings are the router's when it read them, else encoded here
        (one batch). The fast tier's vector lives in another space: its search reads the turns' words only.

        None when the router abstained: a question that looks like none of the experts' training questions
        on its own ("What's the weather tomorrow?" mid-way through a DMV conversation) changed the subject,
        and the conversation's words would find it passages it does not ask about (the in-scope score reads
        the question alone). It is searched as asked; ``turns_left_out`` says how many turns were left out. A turn that
        opens as a reply or points back at what was said ("Yes, it was cancelled.", "Who should complete this?",
        ``routing.ml.conversation.continues``) keeps its conversation, whatever the router makes of it alone.
        """
        weight = knowledge.context_weight()
        texts = [clean_question(q) for q in self.request.earlier_questions][-conversations.CONTEXT_TURNS :]
        if not weight or (not texts and self._stored_turns is None):
            return None
        if self.decision is not None and self.decision.abstained and not conversation_rule.continues(self.question):
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

    def _answer_with(self, slug: str, passages: list[Passage], stream: bool, breaker: Any) -> Opened:
        """``slug``'s first output from ``passages`` with the version that serves it (``serving.expert_answer``), timed."""
        t0 = time.perf_counter()
        try:
            version, adapter = generation_settings(slug, self.arm)
            self.expert_version = version.version if version is not None else None
            request = GenerationRequest(
                question=self._asked_of([slug]), search_question=self.search_question, expert=slug, passages=passages, history=list(self.request.history),
                system_prompt=version.system_prompt if version else "", citation_format=version.citation_format if version else "[{index}]",
                adapter=adapter, max_tokens=min(filter(None, (self.request.max_tokens, self._part_tokens)), default=None),
                temperature=self.request.temperature,
                question_vector=self.decision.vector if self.decision and self.decision.encoder == "fast" else None,
            )
            return open_answer(request, version, breaker, stream=stream, allowed=self.request.allowed, request_id=self.request_id,
                               cacheable=not self.request.history and self.search_context is None)
        finally:
            self.timings["generate_ms"] += (time.perf_counter() - t0) * 1000

    def _first_output(self, candidates: list[str], width: int, stream: bool) -> None:
        """The first candidate that answers (``serving.failover``) and its first output."""
        answered = failover.first_answer(candidates, width, self.decision.raw_scores if self.decision else {}, retrieve=self._retrieve,
                                         answer_with=self._answer_with, stream=stream, skipped=self.failover_from, request_id=self.request_id)
        opened = answered.opened
        self.expert, self._passages, self._first, self._stream, self._answer_breaker = (
            answered.expert, answered.passages, opened.output, opened.stream, opened.breaker)
        self.source, self.expert_version, self._cache_key = opened.source, opened.source.expert_version, opened.cache_key
        self.fallback_used = self.fallback_used or bool(self.failover_from)

    def _accurate(self, candidates: list[str]) -> Answer:
        """``auto:accurate``'s (or a top-2) merged answer (``serving.accurate``), each part shorter: the first part's expert and source stand for it."""
        self._part_tokens = breadth.PART_WORDS
        merged = accurate.answer_accurately(candidates, retrieve=self._retrieve, answer_with=self._answer_with, skipped=self.failover_from,
                                            request_id=self.request_id)
        self.expert, self.source, self._passages, self._parts = merged.expert, merged.source, merged.passages, merged.parts
        for part in self._parts:  # the part of the question each expert answered, where it asked two
            if part["expert"] in self.asked:
                part["asked"] = self.asked[part["expert"]]
        self.expert_version = self.source.expert_version  # the answering expert's version, for the event
        self.fallback_used = bool(self.failover_from)
        return merged.answer

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
            experts_answering=self.experts_answering, asked=self.asked if len(self.experts_answering) > 1 else {},
            clarify=self.clarify, choice=self.choice, refusal=self.refusal,
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
    def experts_answering(self) -> list[str]:
        """The experts whose parts make up the answer: each part's (a merged answer), else the one that answered."""
        return [str(p["expert"]) for p in self._parts] or ([self.expert] if self.expert else [])

    @property
    def streamed_text(self) -> str:
        """What has been streamed so far (empty when the answer was made whole)."""
        return "".join(self._streamed)

    def _timings(self) -> dict[str, float]:
        return {**self.timings, "total_ms": (time.perf_counter() - self._t0) * 1000}

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
