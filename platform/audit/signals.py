"""Audit receivers: Django admin actions (``LogEntry``) and sign-in, sign-out and failed sign-in.

Nothing secret is recorded: Django hands a failed sign-in's credentials with the password already
masked, and we keep only the user name tried.
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.signals import user_logged_in, user_logged_out, user_login_failed
from django.db.models.signals import post_save
from django.dispatch import receiver

from .services import record

ADMIN_ACTIONS = {ADDITION: "admin.add", CHANGE: "admin.change", DELETION: "admin.delete"}


def _changed_fields(entry: LogEntry) -> dict[str, Any]:
    """The field names from the admin's change message (its JSON form), never the values."""
    try:
        messages = json.loads(entry.change_message or "[]")
    except ValueError:
        return {}
    fields: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        for detail in message.values() if isinstance(message, dict) else []:
            if isinstance(detail, dict):
                fields.extend(str(f) for f in detail.get("fields", []))
    return {"fields": fields} if fields else {}


@receiver(post_save, sender=LogEntry, dispatch_uid="audit.admin_log_entry")
def admin_action(sender: Any, instance: LogEntry, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    content_type = instance.content_type
    record(
        ADMIN_ACTIONS.get(instance.action_flag, "admin.action"), actor=instance.user,
        object_type=f"{content_type.app_label}.{content_type.model}" if content_type else "",
        object_id=instance.object_id or "", object_repr=instance.object_repr, changes=_changed_fields(instance),
    )


@receiver(user_logged_in, dispatch_uid="audit.login")
def logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    record("login", actor=user, request=request)


@receiver(user_logged_out, dispatch_uid="audit.logout")
def logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    record("logout", actor=user, request=request)


@receiver(user_login_failed, dispatch_uid="audit.login_failed")
def login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    tried = str(credentials.get("username", ""))[:150]
    record("login_failed", request=request, object_type="auth.user", object_repr=tried)
