from django.apps import AppConfig


class EvaluationConfig(AppConfig):
    """Evaluations and benchmarks that run the product's own code paths (no models of its own)."""

    name = "evaluation"
