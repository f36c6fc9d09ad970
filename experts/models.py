from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models

from .choices import ExampleSource, ExampleSplit, ExpertStatus, VersionStatus


class Expert(models.Model):
    """A domain expert: a slug the router can pick, a knowledge base and (later) an adapter."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    keywords = models.JSONField(default=list, blank=True)
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="experts")
    status = models.CharField(max_length=16, choices=ExpertStatus.choices, default=ExpertStatus.ACTIVE)
    is_fallback = models.BooleanField(default=False, help_text="Receives questions no expert covers.")
    public = models.BooleanField(
        default=False, help_text="Anyone may ask it, signed in or not (its documents and pages stay the team's). Off: its team and staff only.",
    )
    chunk_size = models.PositiveIntegerField(default=1000, help_text="Target characters per chunk.")
    chunk_overlap = models.PositiveIntegerField(default=150, help_text="Characters shared by neighbouring chunks.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class ExpertVersion(models.Model):
    """One servable version of an expert: a LoRA adapter (or none), its prompt and what it was trained on.

    Versions are immutable once trained; editing the prompt makes a new version that shares the
    adapter. Exactly one version per expert is active; the others can be compared and rolled back to.
    """

    expert = models.ForeignKey(Expert, on_delete=models.CASCADE, related_name="versions")
    version = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=VersionStatus.choices, default=VersionStatus.CANDIDATE, db_index=True)
    base_model = models.CharField(max_length=255, blank=True, help_text="BASE_MODEL the adapter was trained on (hub id or local path).")
    adapter_path = models.CharField(max_length=500, blank=True, help_text="Folder of the peft adapter; empty for a prompt-only version.")
    system_prompt = models.TextField(blank=True)
    citation_format = models.CharField(max_length=64, default="[{index}]", help_text="How a passage is cited in answers.")
    knowledge_snapshot = models.CharField(max_length=128, blank=True, help_text="The knowledge-base snapshot it was built and evaluated on.")
    training_params = models.JSONField(default=dict, blank=True)
    data_fingerprint = models.CharField(max_length=64, blank=True)
    n_train = models.PositiveIntegerField(default=0)
    n_eval = models.PositiveIntegerField(default=0)
    metrics = models.JSONField(default=dict, blank=True, help_text="Held-out loss, perplexity and other evaluation figures.")
    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    notes = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    activated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["expert", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["expert", "version"], name="one_number_per_expert_version"),
            models.UniqueConstraint(fields=["expert"], condition=models.Q(status="active"), name="one_active_version_per_expert"),
        ]

    def __str__(self) -> str:
        return f"{self.expert.slug} v{self.version}"

    @property
    def adapter_name(self) -> str:
        """The name the adapter is served under (vLLM's ``model`` field)."""
        return f"{self.expert.slug}-v{self.version}"


class TrainingExample(models.Model):
    """A question/answer pair an expert's adapter learns from (reviewed, imported or grounded in its documents)."""

    expert = models.ForeignKey(Expert, on_delete=models.CASCADE, related_name="training_examples")
    question = models.TextField()
    answer = models.TextField()
    passages = models.JSONField(default=list, blank=True, help_text="Passages the answer is grounded in: [{title, text, url}].")
    source = models.CharField(max_length=16, choices=ExampleSource.choices, default=ExampleSource.REVIEWED)
    split = models.CharField(max_length=8, choices=ExampleSplit.choices, default=ExampleSplit.TRAIN, db_index=True)
    fingerprint = models.CharField(max_length=64, help_text="Hash of the normalised question and answer: the same pair is stored once.")
    created_by = models.ForeignKey("auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["expert", "id"]
        constraints = [models.UniqueConstraint(fields=["expert", "fingerprint"], name="one_copy_per_training_example")]

    def __str__(self) -> str:
        return self.question[:60]
