from django.apps import AppConfig


class AlarmsConfig(AppConfig):
    """Alarms, drift reports and nightly evaluations; their models keep their tables in the experiments app."""

    name = "routing.alarms"
    label = "alarms"
    verbose_name = "Alarms"
