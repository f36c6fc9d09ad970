from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"

    def ready(self) -> None:
        from . import lifecycle  # noqa: F401  (connects the expert lifecycle's signals)
