from __future__ import annotations

from django.db import models

from .choices import ProposalStatus, RunStatus


class Query(models.Model):
    """One historical user query imported from a log."""

    text = models.TextField()
    text_hash = models.CharField(max_length=64, db_index=True, help_text="Hash of the text alone (embedding cache key).")
    row_hash = models.CharField(max_length=64, unique=True, help_text="Hash of the whole row: re-imports skip it.")
    source = models.CharField(max_length=128, db_index=True)
    label = models.CharField(max_length=128, blank=True, db_index=True, help_text="Known domain, if the log has one.")
    user = models.CharField(max_length=128, blank=True)
    conversation = models.CharField(max_length=128, blank=True)
    timestamp = models.DateTimeField(null=True, blank=True)
    split = models.CharField(max_length=16, blank=True, help_text="train/val/test where the source defines one.")
    imported_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return self.text[:80]


class Embedding(models.Model):
    """A cached embedding, keyed by (model, text hash): reclustering never re-embeds."""

    model = models.CharField(max_length=255)
    text_hash = models.CharField(max_length=64)
    vector = models.BinaryField(help_text="float32 little-endian")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["model", "text_hash"], name="unique_embedding_per_model")]


class ClusteringRun(models.Model):
    """One clustering of a query set into topics and expert proposals, and its review."""

    source = models.CharField(max_length=128, blank=True, help_text="Empty: every source.")
    model = models.CharField(max_length=255)
    eps = models.FloatField()
    min_samples = models.PositiveIntegerField()
    n_experts = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64, db_index=True, help_text="Inputs and parameters: same → same run.")
    n_queries = models.PositiveIntegerField(default=0)
    n_topics = models.PositiveIntegerField(default=0)
    noise_share = models.FloatField(default=0.0)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.DRAFT)
    review_log = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Clustering #{self.pk} ({self.n_topics} topics)"


class Proposal(models.Model):
    """A proposed expert: a group of topics with keywords and representative queries."""

    run = models.ForeignKey(ClusteringRun, on_delete=models.CASCADE, related_name="proposals")
    index = models.PositiveIntegerField()
    name = models.CharField(max_length=128)
    keywords = models.JSONField(default=list, blank=True)
    representatives = models.JSONField(default=list, blank=True)
    size = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=16, choices=ProposalStatus.choices, default=ProposalStatus.PROPOSED)
    merged_into = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    expert = models.ForeignKey("experts.Expert", null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals")

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="unique_proposal_index")]

    def __str__(self) -> str:
        return self.name


class Assignment(models.Model):
    """Which topic and proposal a query belongs to in a clustering run."""

    run = models.ForeignKey(ClusteringRun, on_delete=models.CASCADE, related_name="assignments")
    query = models.ForeignKey(Query, on_delete=models.CASCADE, related_name="assignments")
    topic = models.IntegerField(help_text="DBSCAN label; -1 is noise.")
    proposal = models.ForeignKey(Proposal, null=True, on_delete=models.SET_NULL, related_name="assignments")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "query"], name="unique_assignment")]
