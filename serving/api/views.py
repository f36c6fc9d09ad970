"""The OpenAI-compatible chat endpoint (plain and streamed), models, the routing decision, and feedback.

Errors have OpenAI's shape, ``{"error": {"message", "type", "param", "code"}}`` (plus ``details``
where there are some), so the official clients raise their usual exceptions.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.access import Principal, askable_slugs
from experts.generation import GenerationBusy, stream_by_words
from experts.ml.extractive import Answer
from experts.selectors import active_experts, expert_by_slug, experts_by_slug
from sbcommon.api import error_body

from .. import chat, route, traces
from ..conversations import ConversationNotAllowed
from ..feedback import ResponseNotFound, UnknownExpert, record_feedback
from ..sse import event_stream_response
from .auth import ChatApiMixin, allowed_experts, api_key_id, user_id
from .serializers import ChatCompletionRequestSerializer, FeedbackRequestSerializer, RouteRequestSerializer


def _error(message: str, http_status: int, type_: str, *, code: str | None = None, param: str | None = None, details: Any = None,
           headers: dict[str, str] | None = None) -> Response:
    body = error_body(message, type_=type_, param=param, details=details)
    body["error"].setdefault("param", None)
    body["error"]["code"] = code
    return Response(body, status=http_status, headers=headers)


def _model_refusal(request, model: str, allowed: set[str]) -> Response | None:
    """The error for a ``model`` that names an expert the caller may not ask, or None when they may.

    An expert the caller's user may ask but their key's scopes leave out is a 403 (the key is the
    reason); any other expert the caller may not ask is "unknown" (404), so its existence is not
    revealed, and the list of models names only what the caller may ask.
    """
    if model in allowed and expert_by_slug(model) is not None:
        return None
    principal = Principal.of(request)
    if principal.key is not None and principal.key.scopes and model in askable_slugs(Principal(user=principal.user)):
        return _error(f"this API key may not reach expert {model!r}", 403, "permission_denied", code="permission_denied", param="model")
    known = ", ".join([*chat.MODES, *sorted(slug for slug in active_experts().values_list("slug", flat=True) if slug in allowed)])
    return _error(f"unknown model {model!r}; use one of: {known}", 404, "invalid_request_error", code="model_not_found", param="model")


def _usage(turn: chat.ChatTurn, answer: str) -> dict[str, int]:
    """Token counts approximated by whitespace-separated words (the extractive backend has no tokenizer)."""
    prompt = len(turn.request.question.split()) + sum(len(m["content"].split()) for m in turn.request.history)
    completion = len(answer.split())
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _routing_meta(turn: chat.ChatTurn) -> dict[str, Any]:
    """What is known before the answer: who answers, why, in which conversation and arm."""
    decision = turn.decision
    experts = decision.experts if decision else []
    row = experts_by_slug([turn.expert]).get(turn.expert) if turn.expert else None
    return {
        "expert": turn.expert,
        "expert_name": row.name if row is not None else None,  # for a front end's "answered by" (None: no expert answered)
        "experts": experts,
        "runner_up": experts[1] if len(experts) > 1 else None,
        "router_version": decision.router_version if decision else None,
        "routing_path": "router" if turn.request.model.startswith("auto") else "direct",
        "abstained": turn.abstained,
        # Why no expert answers: "out_of_scope" (the router placed the question with none) or "other_language" (it is
        # not in the experts' documents' language); None when one answers.
        "refusal": turn.refusal or None,
        # The router's in-scope score against its abstain threshold, and who it would have chosen when it abstained.
        "routing_evidence": traces.routing_evidence(decision),
        "fallback_used": turn.fallback_used,
        "failover": decision.failover if decision else [],
        "failover_from": list(turn.failover_from),
        "conversation_id": turn.conversation.conversation_id if turn.conversation else "",
        "sticky": turn.sticky,
        # The conversation's expert: the stored conversation's, or the one the request's earlier questions route to ("" none).
        "conversation_expert": turn.conversation_expert or None,
        "context_turns": decision.context_turns if decision else 0,
        "arm": turn.arm.arm if turn.arm else None,
        "experiment_id": turn.arm.experiment_id if turn.arm else None,
        "expert_version": turn.expert_version,
        # Who writes the answer: "model", "extractive", "extractive_fallback" (fallback_reason says why),
        # "not_found" or "none"; the adapter that answered (None: the bare base model or no model).
        "answer_source": turn.source.answer_source,
        "fallback_reason": turn.source.fallback_reason or None,
        "adapter": turn.source.adapter,
        # The semantic answer cache served it: the question the answer was written for (serving.answer_cache).
        "cached": bool(turn.source.cached_question),
        "cached_question": turn.source.cached_question or None,
    }


def _answer_meta(turn: chat.ChatTurn) -> dict[str, Any]:
    result = turn.result
    assert result is not None
    meta = _routing_meta(turn)
    meta.update(grounded=result.grounded, citations=result.citations, timings_ms={k: round(v, 2) for k, v in result.timings.items()},
                finish_reason=result.finish_reason,
                # The experts whose parts make up the answer (two: each answered its part, ``serving.breadth``).
                experts_answering=result.experts_answering,
                # The answer asks which expert the user means: [{"slug", "name"}]; reply naming one, or send its slug as model.
                clarify=result.clarify or None)
    if result.choice:  # the expert the user chose in reply to a clarifying question, answering the question asked before it
        meta["chosen_after_clarify"] = result.choice
    if result.parts:
        meta["parts"] = result.parts
    if result.spelling:
        meta["spelling"] = result.spelling
    if result.earlier_turns_searched:
        meta["conversation_search"] = {"earlier_turns": result.earlier_turns_searched}
    elif result.earlier_turns_left_out:
        # The router placed the question with no expert: a change of subject, searched as asked.
        meta["conversation_search"] = {"earlier_turns": 0, "left_out": result.earlier_turns_left_out, "reason": chat.CHANGED_SUBJECT}
    if result.selection:
        # An extractive answer's choice: the quoted sentence (passage and place, score, why) and the runner-up.
        meta["answer_selection"] = result.selection
    return meta


def _completion_body(turn: chat.ChatTurn) -> dict[str, Any]:
    result = turn.result
    assert result is not None
    return {
        "id": result.request_id,
        "object": "chat.completion",
        "created": turn.created,
        "model": result.mode,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer}, "finish_reason": _finish_reason(result)}],
        "usage": _usage(turn, result.answer),
        "switchboard": _answer_meta(turn),
    }


def _finish_reason(result: chat.ChatResult) -> str:
    """OpenAI's finish reason: "length" for an answer cut at its token limit or time budget."""
    return "stop" if result.finish_reason == "stop" else "length"


def _set_headers(response, turn: chat.ChatTurn) -> None:
    response["x-switchboard-expert"] = turn.expert
    path = f"direct:{turn.expert}" if not turn.request.model.startswith("auto") else ",".join(
        str(e["slug"]) for e in (turn.decision.experts[:2] if turn.decision else []))
    response["x-switchboard-routing-path"] = path
    response["x-switchboard-request-id"] = turn.request_id
    if turn.conversation is not None:
        response["x-switchboard-conversation"] = turn.conversation.conversation_id


def _sse(data: dict[str, Any] | str) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _sse_events(turn: chat.ChatTurn, include_usage: bool) -> Iterator[bytes]:
    """OpenAI's ``chat.completion.chunk`` stream: role, content deltas, finish (with the metadata), usage, ``[DONE]``.

    Closing this generator early (the client went away) closes the turn: the backend stream is
    closed and the event recorded as ``client_cancelled``.
    """
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
        """One chunk; ``extra`` adds keys (``switchboard``, ``usage``) or replaces ``choices``."""
        return _sse({"id": turn.request_id, "object": "chat.completion.chunk", "created": turn.created, "model": turn.request.model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})

    try:
        yield chunk({"role": "assistant", "content": ""}, switchboard=_routing_meta(turn))
        try:
            for delta in turn:
                yield chunk({"content": delta})
        except route.StreamInterrupted as exc:
            yield _sse({"error": {"message": str(exc), "type": "service_unavailable", "param": None, "code": exc.kind}})
            yield _sse("[DONE]")
            return
        result = turn.result
        assert result is not None
        if result.answer and not turn.streamed_text:
            # Answers made whole (auto:accurate's merge, "no expert covers this") go out in word groups.
            for piece in stream_by_words(Answer(text=result.answer)):
                if isinstance(piece, str):
                    yield chunk({"content": piece})
        yield chunk({}, _finish_reason(result), switchboard=_answer_meta(turn))
        if include_usage:
            yield chunk({}, choices=[], usage=_usage(turn, result.answer))
        yield _sse("[DONE]")
    finally:
        turn.close()


class ChatCompletionsView(ChatApiMixin, APIView):
    """``POST /v1/chat/completions``: route, retrieve, answer, in OpenAI's response shape (``stream: true``: server-sent events)."""

    @extend_schema(
        request=ChatCompletionRequestSerializer,
        responses={
            200: OpenApiResponse(OpenApiTypes.OBJECT, description="A `chat.completion` (or with `stream: true`, `text/event-stream` of "
                                 "`chat.completion.chunk`s ending with `data: [DONE]`); `switchboard` holds the routing metadata: on the whole answer (and "
                                 "the stream's last chunk) `experts_answering`, the experts whose parts make up the answer, and `clarify`, "
                                 "the choices ({slug, name}) when the answer asks which expert the user means (null otherwise); `refusal` says why no "
                                 "expert answers (`out_of_scope` or `other_language`; null when one does)."),
            400: OpenApiResponse(description="Malformed or invalid request"), 403: OpenApiResponse(description="Expert outside the key's scope"),
            404: OpenApiResponse(description="Unknown model"), 413: OpenApiResponse(description="Body too large"),
            503: OpenApiResponse(description="No router, every candidate expert is down, or the in-process model's queue is full "
                                 "(`generation_busy`, with `Retry-After`)"),
        },
        examples=[OpenApiExample("ask", request_only=True, value={
            "model": "auto", "messages": [{"role": "user", "content": "How do I apply for retirement benefits?"}], "conversation_id": "conv_1"})],
    )
    def post(self, request):
        serializer = ChatCompletionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        model = data["model"]
        allowed = allowed_experts(request)
        if model not in chat.MODES:
            refusal = _model_refusal(request, model, allowed)
            if refusal is not None:
                return refusal
        turn = chat.ChatTurn(chat.ChatRequest(
            question=data["question"], model=model, history=data["history"], conversation_id=data["conversation_id"], user=data.get("user", ""),
            api_key_id=api_key_id(request), user_id=user_id(request), allowed=allowed, max_tokens=data["max_tokens"],
            temperature=data.get("temperature", 0.0),
        ))
        try:
            turn.start(stream=data["stream"])
        except route.RoutingUnavailable as exc:
            return _error(str(exc), 503, "service_unavailable", code="routing_unavailable")
        except (route.ExpertNotAllowed, ConversationNotAllowed) as exc:
            return _error(str(exc), 403, "permission_denied", code="permission_denied")
        except route.AllExpertsDown as exc:
            return _error(str(exc), 503, "service_unavailable", code="no_expert_available", details={"failover_from": exc.failover_from})
        except route.InvalidQuestion as exc:
            return _error(str(exc), 400, "invalid_request_error", param="messages")
        except GenerationBusy as exc:
            return _error(str(exc), 503, "service_unavailable", code="generation_busy", headers={"Retry-After": str(exc.retry_after_s)})
        if data["stream"]:
            # Closing the response closes the chunk generator (and through it the backend's stream), then the
            # turn, which records the request as client_cancelled unless it finished.
            response = event_stream_response(request, _sse_events(turn, data["include_usage"]), turn.close)
        else:
            for _ in turn:
                pass
            response = Response(_completion_body(turn))
        _set_headers(response, turn)
        return response


class ModelsView(ChatApiMixin, APIView):
    """``GET /v1/models``: the auto modes and the active experts the caller may ask (``experts.access``)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request):
        allowed = allowed_experts(request)
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "switchboard"} for m in chat.MODES]
        data += [{"id": e.slug, "object": "model", "created": int(e.created_at.timestamp()), "owned_by": "switchboard"}
                 for e in active_experts() if e.slug in allowed]
        return Response({"object": "list", "data": data})


class RouteView(ChatApiMixin, APIView):
    """``POST /api/v1/route``: the routing decision only."""

    @extend_schema(request=RouteRequestSerializer, responses={200: OpenApiTypes.OBJECT})
    def post(self, request):
        serializer = RouteRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            decision = route.route(serializer.validated_data["question"], top_k=serializer.validated_data["top_k"], allowed=allowed_experts(request),
                                   fast=serializer.validated_data.get("fast", False), context=serializer.validated_data["context"] or None)
        except route.RoutingUnavailable as exc:
            return _error(str(exc), 503, "service_unavailable", code="routing_unavailable")
        except route.ExpertNotAllowed as exc:
            return _error(str(exc), 403, "permission_denied", code="permission_denied")
        return Response({
            "experts": decision.experts[: serializer.validated_data["top_k"]],
            "failover": decision.failover,
            "abstained": decision.abstained,
            "fallback": decision.fallback,
            "routing_evidence": traces.routing_evidence(decision),
            "router_version": decision.router_version,
            "timings_ms": {"embed": round(decision.embed_ms, 2), "route": round(decision.route_ms, 2)},
        })


class FeedbackView(ChatApiMixin, APIView):
    """``POST /api/v1/feedback``: thumbs up or down (and a comment) on a chat completion, by its ``id``.

    Posting again for the same response updates the verdict (one row per response); a response
    answered for anyone else (another key, another user, an anonymous caller) is "not found" to this
    caller (``serving.feedback.record_feedback``).
    """

    @extend_schema(request=FeedbackRequestSerializer, responses={200: OpenApiTypes.OBJECT, 201: OpenApiTypes.OBJECT, 404: OpenApiTypes.OBJECT})
    def post(self, request):
        serializer = FeedbackRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            feedback, created = record_feedback(data["response_id"], data["rating"], data["comment"], api_key_id(request), data["suggested_expert"],
                                                user_id=user_id(request), allowed=allowed_experts(request))
        except ResponseNotFound:
            return _error(f"no response with id {data['response_id']!r}", 404, "not_found_error", code="response_not_found", param="response_id")
        except UnknownExpert as exc:
            return _error(str(exc), 400, "invalid_request_error", code="unknown_expert", param="suggested_expert")
        body = {"response_id": feedback.request_id, "rating": "up" if feedback.rating > 0 else "down", "comment": feedback.comment,
                "expert": feedback.expert, "suggested_expert": feedback.suggested_expert or None, "updated": not created}
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)
