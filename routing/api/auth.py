"""Authentication, permissions and rate limits of the chat-facing API (``/v1/*`` and ``/api/v1/route``).

Every chat-facing view inherits ``ChatApiMixin``, so who may call them and how often is decided here.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework import permissions


class ChatPermission(permissions.BasePermission):
    """Open on a single-machine install (``CHAT_API_REQUIRE_AUTH=false``), else signed-in users only."""

    def has_permission(self, request, view) -> bool:
        return not settings.CHAT_API_REQUIRE_AUTH or bool(request.user and request.user.is_authenticated)


class ChatApiMixin:
    """Authentication, permission and throttle classes shared by the chat-facing views."""

    permission_classes = [ChatPermission]


def allowed_experts(request) -> set[str] | None:
    """The expert slugs the caller's API key is scoped to, or None when it may reach every expert."""
    return None
