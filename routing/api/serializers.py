"""Serializers for the OpenAI-compatible chat API and the routing API."""

from __future__ import annotations

from django.conf import settings
from rest_framework import serializers


class MessageSerializer(serializers.Serializer):
    role = serializers.ChoiceField(choices=["system", "user", "assistant", "tool", "developer"])
    content = serializers.CharField(allow_blank=True, trim_whitespace=False)


class ChatCompletionRequestSerializer(serializers.Serializer):
    """The subset of OpenAI's chat-completions request that Switchboard uses; other keys are ignored."""

    model = serializers.CharField(default="auto", max_length=64)
    messages = serializers.ListField(child=MessageSerializer(), min_length=1, max_length=200)
    stream = serializers.BooleanField(default=False)
    temperature = serializers.FloatField(required=False, min_value=0, max_value=2)
    max_tokens = serializers.IntegerField(required=False, min_value=1)
    user = serializers.CharField(required=False, allow_blank=True, max_length=256)

    def validate(self, attrs):
        users = [m for m in attrs["messages"] if m["role"] == "user"]
        if not users:
            raise serializers.ValidationError({"messages": "at least one message must have role 'user'"})
        question = users[-1]["content"].strip()
        if not question:
            raise serializers.ValidationError({"messages": "the last user message is empty"})
        if len(question) > settings.MAX_QUESTION_CHARS:
            raise serializers.ValidationError(
                {"messages": f"the last user message is {len(question)} characters; the limit is {settings.MAX_QUESTION_CHARS}"}
            )
        attrs["question"] = question
        return attrs


class RouteRequestSerializer(serializers.Serializer):
    question = serializers.CharField(max_length=8000, trim_whitespace=True)
    top_k = serializers.IntegerField(default=2, min_value=1, max_value=3)
