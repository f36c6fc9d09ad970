from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """A/B experiments, scheduled jobs, drift and load alarms (issue 9)."""

    name = "routing.experiments"
    label = "experiments"
    verbose_name = "Experiments and operations"
    default_auto_field = "django.db.models.BigAutoField"
