from __future__ import annotations

from django.conf import settings
from django.db import models


class AuditEntry(models.Model):
    """One audited action: who, what, on which object, the changes in brief, from which address, when."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    actor_name = models.CharField(max_length=150, blank=True, help_text="The user name at the time (kept if the user is deleted).")
    action = models.CharField(max_length=64, db_index=True)
    object_type = models.CharField(max_length=100, blank=True)
    object_id = models.CharField(max_length=64, blank=True)
    object_repr = models.CharField(max_length=200, blank=True)
    changes = models.JSONField(default=dict, blank=True, help_text="What changed, in brief: field names, never secrets or texts.")
    ip = models.GenericIPAddressField(null=True, blank=True)
    at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        target = f" {self.object_type} {self.object_repr or self.object_id}".rstrip()
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor_name or 'anonymous'} {self.action}{target}"
