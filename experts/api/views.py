"""``/api/v1/experts/{slug}/adapter``: the expert's serving adapter on the vLLM server (admin only).

``POST .../adapter/register`` loads the active version's adapter into the running vLLM server
without a restart (vLLM must run with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, which
``serve_experts`` sets). Nothing is unloaded: if the registration fails, whatever the server served
before keeps serving, and the answer says why it failed.
"""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView

from sbcommon.api import ApiError

from ..access import get_expert_or_404
from ..breaker import breaker_for
from ..generation.base import AdapterRef, GenerationError, GenerationUnavailable
from ..generation.vllm import VllmGenerator
from ..ml.loading import adapter_base_model, same_base
from ..ml.lora_errors import LoraError
from ..models import Expert
from ..selectors import serving_version


class AdapterSerializer(serializers.Serializer):
    expert = serializers.CharField()
    version = serializers.IntegerField()
    adapter = serializers.CharField(help_text="The name vLLM serves it under (the request's model).")
    path = serializers.CharField()
    base_model = serializers.CharField()


class RegisteredSerializer(AdapterSerializer):
    registered = serializers.BooleanField(help_text="False when the server already had it.")
    vllm_url = serializers.CharField()


class AdapterStatusSerializer(serializers.Serializer):
    expert = serializers.CharField()
    adapter = AdapterSerializer(allow_null=True)
    loaded = serializers.BooleanField(allow_null=True, help_text="Whether vLLM lists the adapter; null when vLLM is unreachable.")
    vllm = serializers.DictField()
    breaker = serializers.DictField()


def active_adapter(expert: Expert) -> AdapterRef:
    """The active version's adapter, checked on disk and against BASE_MODEL; ApiError otherwise."""
    version = serving_version(expert.slug)
    if version is None or not version.adapter_path:
        raise ApiError(f"expert {expert.slug!r} has no active version with an adapter: train one and activate it first", status_code=409, code="no_adapter")
    path = Path(version.adapter_path)
    if not (path / "adapter_config.json").is_file():
        raise ApiError(f"the adapter folder of {expert.slug} v{version.version} ({path}) is missing or is not a peft adapter", status_code=409, code="adapter_missing")
    try:
        trained_on = version.base_model or adapter_base_model(path)
    except LoraError as exc:
        raise ApiError(str(exc), status_code=409, code="adapter_missing") from None
    if not same_base(trained_on, settings.BASE_MODEL):
        raise ApiError(
            f"{expert.slug} v{version.version} was trained on {trained_on!r}, not on the served base model {settings.BASE_MODEL!r}",
            status_code=409, code="base_model_mismatch",
        )
    return AdapterRef(expert=expert.slug, name=version.adapter_name, path=str(path), base_model=trained_on, version=version.version)


def _adapter_body(ref: AdapterRef) -> dict:
    return {"expert": ref.expert, "version": ref.version, "adapter": ref.name, "path": ref.path, "base_model": ref.base_model}


class AdapterRegisterView(APIView):
    """Load an expert's active adapter into the running vLLM server (staff only)."""

    permission_classes = [IsAdminUser]

    @extend_schema(
        request=None,
        responses={
            200: RegisteredSerializer,
            404: OpenApiResponse(description="No such expert."),
            409: OpenApiResponse(description="No active adapter, its folder is missing, or it was trained on another base model."),
            502: OpenApiResponse(description="vLLM refused the adapter (the message says why); the previous adapters keep serving."),
            503: OpenApiResponse(description="vLLM is unreachable."),
        },
    )
    def post(self, request, slug: str):
        expert = get_expert_or_404(request.user, slug, edit=True)
        ref = active_adapter(expert)
        generator = VllmGenerator()
        try:
            registered = generator.register(ref)
        except GenerationUnavailable as exc:
            raise ApiError(str(exc), status_code=503, code="vllm_unavailable") from None
        except GenerationError as exc:
            raise ApiError(str(exc), status_code=502, code="vllm_error") from None
        finally:
            generator.close()
        return Response({**_adapter_body(ref), "registered": registered, "vllm_url": generator.base_url})


class AdapterStatusView(APIView):
    """The expert's active adapter, whether vLLM serves it, and its circuit breaker (staff only)."""

    permission_classes = [IsAdminUser]

    @extend_schema(responses={200: AdapterStatusSerializer})
    def get(self, request, slug: str):
        expert = get_expert_or_404(request.user, slug)
        try:
            ref: AdapterRef | None = active_adapter(expert)
        except ApiError:
            ref = None
        generator = VllmGenerator(retries=0)
        try:
            health = generator.health()
        finally:
            generator.close()
        loaded: bool | None = None  # unknown while vLLM is unreachable
        if health["ok"]:
            loaded = ref is not None and ref.name in health["adapters"]
        return Response({
            "expert": expert.slug,
            "adapter": _adapter_body(ref) if ref else None,
            "loaded": loaded,
            "vllm": {"url": health["url"], "ok": health["ok"], "error": health["error"]},
            "breaker": breaker_for(expert.slug).snapshot(),
        })
