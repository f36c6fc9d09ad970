from django.contrib import admin

from .models import ApiKey


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    """Read-mostly: keys are created and revoked in the console, where the secret is shown once."""

    list_display = ("name", "prefix", "scopes", "rate_limit_per_minute", "created_by", "created_at", "last_used_at", "revoked_at")
    readonly_fields = ("prefix", "key_hash", "created_at", "last_used_at")
    list_filter = ("revoked_at",)
    search_fields = ("name", "prefix")

    def has_add_permission(self, request) -> bool:
        return False  # a key made here would have no secret anyone ever saw
