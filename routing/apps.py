from django.apps import AppConfig


class RoutingConfig(AppConfig):
    name = "routing"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
