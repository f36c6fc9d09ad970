"""Writing audit entries (``record``) and pruning old ones."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from .models import AuditEntry

logger = logging.getLogger(__name__)

# Keys whose values never enter the audit log, whatever a caller passes.
SECRET_KEYS = ("password", "secret", "token", "key", "question", "text", "content", "message")


def client_ip(request: Any) -> str | None:
    """The client's address: the first X-Forwarded-For hop behind a trusted proxy (``BEHIND_PROXY``), else REMOTE_ADDR."""
    if request is None:
        return None
    meta = getattr(request, "META", {})
    forwarded = meta.get("HTTP_X_FORWARDED_FOR", "") if settings.SECURE_PROXY_SSL_HEADER else ""
    ip = (forwarded.split(",")[0].strip() if forwarded else meta.get("REMOTE_ADDR", "")) or None
    if ip is not None:
        from django.core.exceptions import ValidationError
        from django.core.validators import validate_ipv46_address

        try:
            validate_ipv46_address(ip)
        except ValidationError:
            return None
    return ip


def scrub(changes: Any) -> Any:
    """``changes`` with every value under a secret-looking key replaced (field names stay: they say what changed)."""
    if isinstance(changes, dict):
        return {
            str(k): ("[redacted]" if any(s in str(k).lower() for s in SECRET_KEYS) and not isinstance(v, list | dict) else scrub(v))
            for k, v in changes.items()
        }
    if isinstance(changes, list):
        return [scrub(v) for v in changes[:100]]
    if isinstance(changes, str):
        return changes[:500]
    return changes


def record(action: str, *, actor: Any = None, obj: Any = None, object_type: str = "", object_id: Any = "", object_repr: str = "",
           changes: Any = None, request: Any = None) -> AuditEntry:
    """Write one audit entry.

    Args:
        action: what happened, e.g. ``login``, ``admin.change``, ``api_key.create``.
        actor: the user who did it (default: ``request.user`` when signed in).
        obj: the model instance acted on (its type, id and ``str`` are recorded), or give the parts.
        changes: a short JSON summary (e.g. the names of changed fields); secret-looking values are scrubbed.
        request: the HTTP request, for the client address and the user.
    """
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if getattr(user, "is_authenticated", False) else None
    if obj is not None:
        object_type = object_type or f"{obj._meta.app_label}.{obj._meta.model_name}"
        object_id = object_id or getattr(obj, "pk", "")
        object_repr = object_repr or str(obj)
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        actor_name=(getattr(actor, "get_username", lambda: "")() if actor is not None else "")[:150],
        action=action[:64], object_type=object_type[:100], object_id=str(object_id or "")[:64], object_repr=str(object_repr)[:200],
        changes=scrub(changes or {}), ip=client_ip(request),
    )


def prune(now: Any = None) -> int:
    """Delete entries older than ``AUDIT_RETENTION_DAYS``; returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.AUDIT_RETENTION_DAYS)
    deleted, _ = AuditEntry.objects.filter(at__lt=cutoff).delete()
    return deleted
