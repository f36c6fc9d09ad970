from __future__ import annotations

from django.db import models


class RouterVersion(models.Model):
    """A trained router artefact on disk (config.json + safetensors) and the experts it outputs."""

    version = models.PositiveIntegerField(unique=True)
    path = models.CharField(max_length=500)
    experts = models.JSONField(help_text="Expert slugs in output order.")
    embedding_model = models.CharField(max_length=255)
    data_fingerprint = models.CharField(max_length=64, db_index=True)
    metrics = models.JSONField(default=dict, blank=True)
    is_active = models.BooleanField(default=False, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-version"]
        constraints = [models.UniqueConstraint(fields=["is_active"], condition=models.Q(is_active=True), name="one_active_router")]

    def __str__(self) -> str:
        return f"router v{self.version}"


class TrainingRun(models.Model):
    """One router training: parameters, loss curves, metrics and the version it produced."""

    job = models.ForeignKey("jobs.Job", null=True, blank=True, on_delete=models.SET_NULL)
    params = models.JSONField(default=dict)
    history = models.JSONField(default=list, blank=True)
    metrics = models.JSONField(default=dict, blank=True)
    n_train = models.PositiveIntegerField(default=0)
    n_val = models.PositiveIntegerField(default=0)
    router_version = models.ForeignKey(RouterVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="training_runs")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"training run {self.pk}"


class RoutingEvent(models.Model):
    """One routed request: who was chosen with what scores, and where the time went."""

    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    request_id = models.CharField(max_length=64, db_index=True)
    mode = models.CharField(max_length=32)
    router_version = models.PositiveIntegerField(null=True, blank=True)
    expert = models.CharField(max_length=64, blank=True, db_index=True, help_text="The expert that answered.")
    experts = models.JSONField(default=list, help_text="Ranked [{slug, score}] from the router.")
    question_chars = models.PositiveIntegerField(default=0)
    question = models.TextField(blank=True, help_text="The question, kept for review only when STORE_QUESTION_TEXT is on; purged with the event.")
    grounded = models.BooleanField(default=True)
    fallback_used = models.BooleanField(default=False)
    abstained = models.BooleanField(default=False, help_text="The router found no expert close enough to the question.")
    embed_ms = models.FloatField(default=0)
    route_ms = models.FloatField(default=0)
    retrieve_ms = models.FloatField(default=0)
    generate_ms = models.FloatField(default=0)
    total_ms = models.FloatField(default=0)
    status_code = models.PositiveIntegerField(default=200)
    conversation_id = models.CharField(max_length=64, blank=True, db_index=True)
    api_key_id = models.PositiveIntegerField(null=True, blank=True, help_text="The client's API key (platform/clients), if any.")
    user_id = models.PositiveIntegerField(null=True, blank=True, help_text="The signed-in user who asked (console or API without a key), if any.")
    experiment_id = models.PositiveIntegerField(null=True, blank=True, db_index=True, help_text="The A/B experiment this request took part in.")
    arm = models.CharField(max_length=32, blank=True, help_text="The experiment arm it was assigned to.")
    expert_version = models.PositiveIntegerField(null=True, blank=True, help_text="The version of the answering expert.")
    failover_from = models.JSONField(default=list, blank=True, help_text="Experts tried before the one that answered: [{slug, reason}].")
    error_kind = models.CharField(max_length=32, blank=True, help_text="Why the request failed, when it did.")
    answer_source = models.CharField(
        max_length=32, blank=True,
        help_text='Who wrote the answer: "model", "extractive", "extractive_fallback", "not_found" or "none" (no expert answered).',
    )
    fallback_reason = models.CharField(max_length=200, blank=True, help_text="Why the extractive fallback answered instead of the model.")
    trace = models.JSONField(
        default=dict, blank=True,
        help_text="What explains the answer (serving.traces): the router's evidence, scores, the passages retrieved and cited, the answer when text is stored.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.request_id} → {self.expert or '-'}"


class Feedback(models.Model):
    """A user's verdict on one answer (thumbs up or down, an optional comment), keyed by the response id."""

    request_id = models.CharField(max_length=64, unique=True, help_text="The chat completion id the feedback is about.")
    rating = models.SmallIntegerField(choices=[(1, "thumbs up"), (-1, "thumbs down")])
    comment = models.TextField(blank=True)
    expert = models.CharField(max_length=64, blank=True, db_index=True, help_text="The expert that answered (copied from the event).")
    suggested_expert = models.CharField(
        max_length=64, blank=True, help_text="Who should have answered, when the user reported a wrong expert (proposed in the review queue).",
    )
    api_key_id = models.PositiveIntegerField(null=True, blank=True)
    user_id = models.PositiveIntegerField(null=True, blank=True, help_text="The signed-in user who gave it, if any.")
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.request_id}: {'+' if self.rating > 0 else '-'}"


class Conversation(models.Model):
    """A chat conversation: the expert it sticks to and its last user turns as embeddings (never their text)."""

    conversation_id = models.CharField(max_length=64, unique=True)
    expert = models.CharField(max_length=64, blank=True, help_text="The expert that answered the last turn (the sticky one).")
    turns = models.JSONField(default=list, blank=True, help_text="Embeddings of the last user turns, oldest first (float16, base64).")
    n_turns = models.PositiveIntegerField(default=0)
    api_key_id = models.PositiveIntegerField(null=True, blank=True, help_text="The API key that started it; other keys cannot continue it.")
    user_id = models.PositiveIntegerField(
        null=True, blank=True, help_text="The signed-in user that started it (without a key); nobody else can continue it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return f"{self.conversation_id} → {self.expert or '-'}"
