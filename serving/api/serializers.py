"""Serializers for the OpenAI-compatible chat API, the routing API and feedback."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from sbcommon.api import LeanSerializer

from ..conversations import ID_PATTERN

FEEDBACK_COMMENT_MAX = 2000


@extend_schema_field(OpenApiTypes.ANY)
class MessageContentField(serializers.Field):
    """OpenAI's message content: a string, or a list of parts of which only ``text`` parts are understood."""

    default_error_messages = {
        "type": "content must be a string or a list of content parts, got {kind}",
        "part": "each content part must be an object with a 'type', got {kind}",
        "unsupported": "content parts of type {kind!r} are not supported; send text only (type 'text')",
        "text": "a 'text' content part needs a string 'text'",
    }

    def __init__(self, **kwargs: Any):
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if isinstance(data, str):
            return data
        if not isinstance(data, list):
            self.fail("type", kind=type(data).__name__)
        texts = []
        for part in data:
            if not isinstance(part, dict) or "type" not in part:
                self.fail("part", kind=type(part).__name__)
            if part["type"] != "text":
                self.fail("unsupported", kind=str(part["type"]))
            if not isinstance(part.get("text"), str):
                self.fail("text")
            texts.append(part["text"])
        return "\n".join(texts)

    def to_representation(self, value: Any) -> Any:
        return value


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant", "tool", "developer"])
    content = MessageContentField(required=False)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs["content"] = attrs.get("content") or ""
        return attrs


class ChatCompletionRequestSerializer(LeanSerializer):
    """The subset of OpenAI's chat-completions request that Switchboard uses; other keys are ignored.

    Switchboard's extension: ``conversation_id`` (or ``metadata.conversation_id``) continues a
    conversation; without it a new one is started and its id returned in
    ``switchboard.conversation_id`` and the ``x-switchboard-conversation`` header.
    """

    model = serializers.CharField(default="auto", max_length=64)
    messages = serializers.ListField(child=MessageSerializer(), min_length=1, max_length=200)
    stream = serializers.BooleanField(default=False)
    stream_options = serializers.DictField(required=False, allow_null=True, help_text="`include_usage: true` adds a usage chunk before `[DONE]`.")
    temperature = serializers.FloatField(required=False, min_value=0, max_value=2)
    max_tokens = serializers.IntegerField(required=False, min_value=1, max_value=32768)
    max_completion_tokens = serializers.IntegerField(required=False, min_value=1, max_value=32768)
    # OpenAI's ``n`` (choices per request): one answer is routed, retrieved and logged per request, so more than one is refused
    # rather than silently answered once.
    n = serializers.IntegerField(required=False, min_value=1, max_value=1, error_messages={
        "max_value": "Switchboard gives one answer per request: send n = 1 (or leave it out) and ask again for another"})
    user = serializers.CharField(required=False, allow_blank=True, max_length=256)
    conversation_id = serializers.RegexField(ID_PATTERN, required=False, allow_blank=True, max_length=64,
                                             help_text="Continue this conversation (letters, digits, _ . : -; at most 64).")
    metadata = serializers.DictField(required=False, allow_null=True, help_text="OpenAI's metadata; `conversation_id` is read from it too.")

    def validate_model(self, value: str) -> str:
        if not isinstance(self.initial_data.get("model", "auto"), str):
            raise serializers.ValidationError("model must be a string such as 'auto' or an expert's slug")
        return value

    def validate_stream_options(self, value: dict[str, Any] | None) -> dict[str, Any]:
        value = value or {}
        if not isinstance(value.get("include_usage", False), bool):
            raise serializers.ValidationError("include_usage must be true or false")
        return value

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        messages = attrs["messages"]
        users = [i for i, m in enumerate(messages) if m["role"] == "user"]
        if not users:
            raise serializers.ValidationError({"messages": "at least one message must have role 'user'"})
        last = users[-1]
        question = messages[last]["content"].strip()
        if not question:
            raise serializers.ValidationError({"messages": "the last user message is empty"})
        if len(question) > settings.MAX_QUESTION_CHARS:
            raise serializers.ValidationError(
                {"messages": f"the last user message is {len(question)} characters; the limit is {settings.MAX_QUESTION_CHARS}"}
            )
        conversation = attrs.get("conversation_id") or (attrs.get("metadata") or {}).get("conversation_id") or ""
        if conversation and (not isinstance(conversation, str) or not ID_PATTERN.match(conversation)):
            raise serializers.ValidationError({"metadata": "conversation_id must be 1-64 letters, digits or _ . : -"})
        attrs["conversation_id"] = conversation
        attrs["question"] = question
        attrs["history"] = [{"role": m["role"], "content": m["content"]} for m in messages[:last]]
        attrs["max_tokens"] = attrs.get("max_completion_tokens") or attrs.get("max_tokens")
        attrs["include_usage"] = bool((attrs.get("stream_options") or {}).get("include_usage"))
        return attrs


class RouteRequestSerializer(LeanSerializer):
    question = serializers.CharField(max_length=8000, trim_whitespace=True)
    top_k = serializers.IntegerField(default=2, min_value=1, max_value=3)
    # The router's fast tier (auto:fast's), where the active version has one; else the full router.
    fast = serializers.BooleanField(default=False)
    # The user's earlier questions in the conversation, oldest first: an unsure follow-up is ranked with them.
    context = serializers.ListField(child=serializers.CharField(max_length=8000, allow_blank=True), max_length=50, default=list)


@extend_schema_field(OpenApiTypes.ANY)
class RatingField(serializers.Field):
    """``"up"``/``"down"`` or ``1``/``-1``, stored as 1 or -1."""

    default_error_messages = {"invalid": "rating must be 'up', 'down', 1 or -1"}
    _values = {"up": 1, "down": -1, 1: 1, -1: -1, "1": 1, "-1": -1}

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, str | int) or data not in self._values:
            self.fail("invalid")
        return self._values[data]

    def to_representation(self, value: int) -> str:
        return "up" if value > 0 else "down"


class FeedbackRequestSerializer(LeanSerializer):
    response_id = serializers.CharField(max_length=64, help_text="The `id` of the chat completion.")
    rating = RatingField(help_text="'up', 'down', 1 or -1.")
    comment = serializers.CharField(required=False, allow_blank=True, default="", max_length=FEEDBACK_COMMENT_MAX, trim_whitespace=True)
    suggested_expert = serializers.SlugField(
        required=False, allow_blank=True, default="", max_length=64,
        help_text="A wrong-expert report: the slug of the expert that should have answered (makes the rating 'down').",
    )
