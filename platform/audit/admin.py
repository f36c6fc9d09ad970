"""The audit log in Django's admin: read-only, filterable, searchable (staff with the view permission)."""

from __future__ import annotations

from django.contrib import admin

from .models import AuditEntry


@admin.register(AuditEntry)
class AuditEntryAdmin(admin.ModelAdmin):
    list_display = ("at", "actor_name", "action", "object_type", "object_repr", "ip")
    list_filter = ("action", "object_type")
    search_fields = ("actor_name", "object_repr", "object_id", "ip")
    date_hierarchy = "at"
    readonly_fields = [f.name for f in AuditEntry._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # an audit trail is append-only; old entries go by AUDIT_RETENTION_DAYS
