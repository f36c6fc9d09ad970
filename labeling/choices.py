from django.db import models


class ProposalStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    MERGED = "merged", "Merged into another"
    DISCARDED = "discarded", "Discarded"
    PROMOTED = "promoted", "Promoted to expert"


class RunStatus(models.TextChoices):
    DRAFT = "draft", "In review"
    PROMOTED = "promoted", "Promoted"
