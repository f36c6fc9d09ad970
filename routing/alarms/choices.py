from django.db import models


class AlarmKind(models.TextChoices):
    LOAD = "load", "Expert load"
    DRIFT = "drift", "Query drift"
    SRM = "srm", "Sample ratio mismatch"
    NEW_EXPERT = "new_expert", "Uncovered cluster"
    ROUTER = "router", "Router candidate"


# Alarms about the router as a whole, not about some experts: one of them that names no expert is shown to
# every signed-in user (``routing.alarms.selectors.visible_alarms``).
ROUTER_WIDE_ALARMS = frozenset({AlarmKind.DRIFT, AlarmKind.ROUTER})


class AlarmStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
