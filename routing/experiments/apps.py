from django.apps import AppConfig


class ExperimentsConfig(AppConfig):
    """A/B experiments of an expert's or the router's versions.

    Its migrations also hold the tables of the alarms (``routing.alarms``) and of the schedules'
    claimed firings (``routing.schedules``), whose models declare this app's label.
    """

    name = "routing.experiments"
    label = "experiments"
    verbose_name = "Experiments"
    default_auto_field = "django.db.models.BigAutoField"
