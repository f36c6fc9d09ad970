from __future__ import annotations

from django.conf import settings
from django.db import models


class ApiKey(models.Model):
    """A client's API key: only its SHA-256 hash is stored; the secret is shown once, at creation."""

    name = models.CharField(max_length=100, help_text="What the key is for, e.g. the front end that uses it.")
    prefix = models.CharField(max_length=16, db_index=True, help_text="The key's first characters, shown in lists to tell keys apart.")
    key_hash = models.CharField(max_length=64, unique=True, help_text="SHA-256 hex digest of the whole key.")
    scopes = models.JSONField(default=list, blank=True, help_text="Expert slugs the key may reach; empty means every expert.")
    rate_limit_per_minute = models.PositiveIntegerField(default=600, help_text="Requests per minute; 0 means unlimited.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys")
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True, help_text="Updated at most once per KEY_LAST_USED_RESOLUTION_S.")
    revoked_at = models.DateTimeField(null=True, blank=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None
