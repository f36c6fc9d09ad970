from __future__ import annotations

from django.conf import settings
from django.db import models

from .choices import ProposalStatus, ReviewActionKind, RunStatus


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
    answer = models.TextField(blank=True, default="", help_text="The gold answer, where the log has one: grounded training examples learn it.")
    team = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The team that imported it: only its members (and staff) see it and cluster it. Empty: staff only.",
    )
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

    def __str__(self) -> str:
        return f"{self.model}:{self.text_hash[:12]}"


class ClusteringRun(models.Model):
    """One clustering of a query set into topics and expert proposals, and its review."""

    source = models.CharField(max_length=128, blank=True, help_text="Empty: every source of the run's team.")
    team = models.ForeignKey(
        "auth.Group", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="The team that reviews it; it clusters that team's queries only. Empty: staff only.",
    )
    model = models.CharField(max_length=255)
    eps = models.FloatField()
    min_samples = models.PositiveIntegerField()
    n_experts = models.PositiveIntegerField()
    fingerprint = models.CharField(max_length=64, db_index=True, help_text="Inputs and parameters: same → same run.")
    n_queries = models.PositiveIntegerField(default=0)
    n_topics = models.PositiveIntegerField(default=0)
    noise_share = models.FloatField(default=0.0)
    status = models.CharField(max_length=16, choices=RunStatus.choices, default=RunStatus.DRAFT)
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
    cohesion = models.FloatField(null=True, blank=True, help_text="Mean cosine similarity of its queries to their centroid.")
    centroid = models.BinaryField(null=True, blank=True, help_text="Normalised mean embedding, float32 little-endian.")
    status = models.CharField(max_length=16, choices=ProposalStatus.choices, default=ProposalStatus.PROPOSED)
    merged_into = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    seed_queries = models.JSONField(default=list, blank=True, help_text="Example queries chosen when it was promoted.")
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
    documents_point_to = models.ForeignKey(
        "experts.Expert", null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="In a run seeded by documents: the expert whose documents match this question best, where that is not its proposal's.",
    )

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "query"], name="unique_assignment")]

    def __str__(self) -> str:
        return f"query {self.query_id} → topic {self.topic}"

    @property
    def points_elsewhere(self) -> bool:
        """Whether the question's best-matching documents belong to another expert than its proposal's (a likely misplacement)."""
        return self.documents_point_to_id is not None and self.documents_point_to_id != (self.proposal.expert_id if self.proposal else None)


class ReviewAction(models.Model):
    """One change a reviewer made to a clustering run, with what it takes to undo it."""

    run = models.ForeignKey(ClusteringRun, on_delete=models.CASCADE, related_name="actions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=16, choices=ReviewActionKind.choices)
    summary = models.CharField(max_length=255, help_text="What was done, in words.")
    details = models.JSONField(default=dict, blank=True)
    undo_state = models.JSONField(default=dict, blank=True, help_text="What undoing needs: previous names, statuses, memberships.")
    undone = models.BooleanField(default=False)
    undone_at = models.DateTimeField(null=True, blank=True)
    undone_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.summary


class ReviewDecision(models.Model):
    """A reviewer's verdict on one served question from the review queue (one per request id).

    The question becomes a labelled ``Query`` assigned to the chosen expert's promoted proposal in the
    latest promoted clustering run, which is what the next router training reads
    (``selectors.routing_examples``). ``routed_expert`` keeps what the router chose, so the console
    can show router choice against reviewed label.
    """

    request_id = models.CharField(max_length=64, unique=True, help_text="The routing event's request id.")
    reason = models.CharField(max_length=16, help_text="Why it was queued: low_confidence, abstained, thumbs_down or likely_misroute.")
    routed_expert = models.CharField(max_length=64, blank=True, help_text="The expert that answered it.")
    expert = models.ForeignKey("experts.Expert", null=True, blank=True, on_delete=models.SET_NULL, related_name="review_decisions",
                               help_text="The right expert; empty when the reviewer dismissed the question.")
    query = models.ForeignKey(Query, null=True, blank=True, on_delete=models.SET_NULL, related_name="review_decisions")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.request_id}: {self.routed_expert or '-'} → {self.expert_id or 'dismissed'}"

    @property
    def is_misroute(self) -> bool:
        return self.expert is not None and self.expert.slug != self.routed_expert
