from django.apps import AppConfig
from django.db.models.signals import post_delete, post_save


class ServingConfig(AppConfig):
    """The request path: chat completions, routing decisions, events, conversations, metrics."""

    name = "serving"

    def ready(self) -> None:
        from routing.models import RouterVersion

        from .route import clear_serving_caches

        # A saved or deleted router version is re-read by this process's next request (other
        # processes rely on SERVING_CACHE_TTL_S).
        post_save.connect(clear_serving_caches, sender=RouterVersion, dispatch_uid="serving-cache-save-RouterVersion", weak=False)
        post_delete.connect(clear_serving_caches, sender=RouterVersion, dispatch_uid="serving-cache-delete-RouterVersion", weak=False)
