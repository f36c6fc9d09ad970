from django.db import models


class ExpertStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    DISABLED = "disabled", "Disabled"


class VersionStatus(models.TextChoices):
    TRAINING = "training", "Training"
    CANDIDATE = "candidate", "Candidate"
    ACTIVE = "active", "Active"
    ARCHIVED = "archived", "Archived"
    FAILED = "failed", "Failed"


class ExampleSource(models.TextChoices):
    REVIEWED = "reviewed", "Reviewed by the team"
    IMPORTED = "imported", "Imported (JSONL)"
    GROUNDED = "grounded", "Built from the knowledge base"


class ExampleSplit(models.TextChoices):
    TRAIN = "train", "Train"
    EVAL = "eval", "Held out"
