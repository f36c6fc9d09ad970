from django.apps import AppConfig


class ExpertsConfig(AppConfig):
    name = "experts"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
