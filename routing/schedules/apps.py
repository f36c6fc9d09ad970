from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    """The platform's schedules; their one model (``ScheduledRun``) keeps its table in the experiments app."""

    name = "routing.schedules"
    label = "schedules"
    verbose_name = "Schedules"
