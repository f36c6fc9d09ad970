from django.apps import AppConfig


class AuditConfig(AppConfig):
    name = "audit"
    label = "audit"
    verbose_name = "Audit log"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (connects the admin and sign-in receivers)
