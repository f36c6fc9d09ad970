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
