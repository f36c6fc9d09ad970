from django.db import models


class ExperimentKind(models.TextChoices):
    EXPERT = "expert", "Two versions of an expert"
    ROUTER = "router", "Two versions of the router"


class ExperimentStatus(models.TextChoices):
    DRAFT = "draft", "Draft"
    RUNNING = "running", "Running"
    PAUSED = "paused", "Paused"
    STOPPED = "stopped", "Stopped"
    PROMOTED = "promoted", "Promoted"
    ROLLED_BACK = "rolled_back", "Rolled back"


# Experiments in these states hold their target: a second one on the same expert or router is refused.
OPEN_STATUSES = (ExperimentStatus.DRAFT, ExperimentStatus.RUNNING, ExperimentStatus.PAUSED)


class Unit(models.TextChoices):
    CONVERSATION = "conversation", "Conversation"
    USER = "user", "User"


class Metric(models.TextChoices):
    THUMBS_UP = "thumbs_up_rate", "Thumbs-up rate (rated answers)"
    FALLBACK = "fallback_rate", "Fallback rate"
    ABSTAIN = "abstain_rate", "Abstain rate"


class Design(models.TextChoices):
    SEQUENTIAL = "sequential", "Sequential (always valid, peeking is safe)"
    FIXED = "fixed", "Fixed horizon (read once at the planned sample)"


class AlarmKind(models.TextChoices):
    LOAD = "load", "Expert load"
    DRIFT = "drift", "Query drift"
    SRM = "srm", "Sample ratio mismatch"
    NEW_EXPERT = "new_expert", "Uncovered cluster"
    ROUTER = "router", "Router candidate"


# Alarms about the router as a whole, not about some experts: one of them that names no expert is shown to
# every signed-in user (selectors.visible_alarms).
ROUTER_WIDE_ALARMS = frozenset({AlarmKind.DRIFT, AlarmKind.ROUTER})


class AlarmStatus(models.TextChoices):
    OPEN = "open", "Open"
    ACKNOWLEDGED = "acknowledged", "Acknowledged"
