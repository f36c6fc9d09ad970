"""The OpenAI-compatible chat endpoint and the routing decision endpoint."""

from __future__ import annotations

import time

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from experts.selectors import active_experts, expert_by_slug
from sbcommon.api import ApiError, error_body

from .. import services
from .auth import ChatApiMixin
from .serializers import ChatCompletionRequestSerializer, RouteRequestSerializer


def _completion_body(result: services.ChatResult) -> dict:
    prompt_tokens = 0
    completion_tokens = len(result.answer.split())
    return {
        "id": result.request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": result.mode,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": result.answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": completion_tokens},
        "switchboard": {
            "expert": result.expert,
            "experts": result.decision.experts,
            "runner_up": result.decision.experts[1] if len(result.decision.experts) > 1 else None,
            "router_version": result.decision.router_version,
            "routing_path": "router" if result.mode.startswith("auto") else "direct",
            "grounded": result.grounded,
            "fallback_used": result.fallback_used,
            "abstained": result.abstained,
            "failover": result.decision.failover,
            "citations": result.citations,
            "timings_ms": {k: round(v, 2) for k, v in result.timings.items()},
        },
    }


class ChatCompletionsView(ChatApiMixin, APIView):
    """``POST /v1/chat/completions``: route, retrieve, answer, in OpenAI's response shape."""

    @extend_schema(request=ChatCompletionRequestSerializer, responses={200: dict})
    def post(self, request):
        serializer = ChatCompletionRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data["stream"]:
            raise ApiError("streaming is not supported yet; send stream: false", param="stream")
        model = data["model"]
        if model not in services.MODES:
            expert = expert_by_slug(model)
            if expert is None:
                known = ", ".join([*services.MODES, *active_experts().values_list("slug", flat=True)])
                raise ApiError(f"unknown model {model!r}; use one of: {known}", status_code=404, code="model_not_found", param="model")
        try:
            result = services.answer(data["question"], model=model)
        except services.RoutingUnavailable as exc:
            return Response(error_body(str(exc), type_="service_unavailable"), status=status.HTTP_503_SERVICE_UNAVAILABLE)
        response = Response(_completion_body(result))
        response["x-switchboard-expert"] = result.expert
        response["x-switchboard-routing-path"] = ",".join(str(e["slug"]) for e in result.decision.experts[:2]) if result.mode.startswith("auto") else f"direct:{result.expert}"
        return response


class ModelsView(ChatApiMixin, APIView):
    """``GET /v1/models``: the auto modes and every active expert."""

    @extend_schema(responses={200: dict})
    def get(self, request):
        data = [{"id": m, "object": "model", "owned_by": "switchboard"} for m in services.MODES]
        data += [{"id": e.slug, "object": "model", "owned_by": "switchboard"} for e in active_experts()]
        return Response({"object": "list", "data": data})


class RouteView(ChatApiMixin, APIView):
    """``POST /api/v1/route``: the routing decision only."""

    @extend_schema(request=RouteRequestSerializer, responses={200: dict})
    def post(self, request):
        serializer = RouteRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            decision = services.route(serializer.validated_data["question"], top_k=serializer.validated_data["top_k"])
        except services.RoutingUnavailable as exc:
            return Response(error_body(str(exc), type_="service_unavailable"), status=status.HTTP_503_SERVICE_UNAVAILABLE)
        return Response({
            "experts": decision.experts[: serializer.validated_data["top_k"]],
            "failover": decision.failover,
            "abstained": decision.abstained,
            "router_version": decision.router_version,
            "timings_ms": {"embed": round(decision.embed_ms, 2), "route": round(decision.route_ms, 2)},
        })
