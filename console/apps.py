from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    """Pages for domain teams that read from several apps (no models of its own)."""

    name = "console"
