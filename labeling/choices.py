from django.db import models


class ProposalStatus(models.TextChoices):
    PROPOSED = "proposed", "Proposed"
    MERGED = "merged", "Merged into another"
    DISCARDED = "discarded", "Discarded"
    PROMOTED = "promoted", "Promoted to expert"
    SPLIT = "split", "Split into smaller proposals"


class RunStatus(models.TextChoices):
    DRAFT = "draft", "In review"
    PROMOTED = "promoted", "Promoted"
    DISCARDED = "discarded", "Discarded"


class ReviewActionKind(models.TextChoices):
    RENAME = "rename", "Rename"
    MERGE = "merge", "Merge"
    SPLIT = "split", "Split"
    DISCARD = "discard", "Discard"
    MOVE = "move", "Move queries"
    DETACH_NOISE = "detach_noise", "Detach noise"
    ATTACH_NOISE = "attach_noise", "Attach noise"
    ALIGN = "align", "Align with known labels"
    PROMOTE = "promote", "Promote to expert"
    FINISH = "finish", "Finish review"
    DISCARD_RUN = "discard_run", "Discard the run"


# Undo walks back the latest action only; promotion and scripted alignment are not undone, and nothing before them is.
UNDOABLE_ACTIONS = frozenset(
    {ReviewActionKind.RENAME, ReviewActionKind.MERGE, ReviewActionKind.SPLIT, ReviewActionKind.DISCARD,
     ReviewActionKind.MOVE, ReviewActionKind.DETACH_NOISE, ReviewActionKind.ATTACH_NOISE}
)
# Proposals a reviewer still works with (merged, split and discarded ones are closed).
OPEN_STATUSES = (ProposalStatus.PROPOSED, ProposalStatus.PROMOTED)
