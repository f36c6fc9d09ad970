from __future__ import annotations

from django.contrib.auth.models import Group
from django.db import models

from .choices import ExpertStatus


class Expert(models.Model):
    """A domain expert: a slug the router can pick, a knowledge base and (later) an adapter."""

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=128)
    description = models.TextField(blank=True)
    keywords = models.JSONField(default=list, blank=True)
    team = models.ForeignKey(Group, null=True, blank=True, on_delete=models.SET_NULL, related_name="experts")
    status = models.CharField(max_length=16, choices=ExpertStatus.choices, default=ExpertStatus.ACTIVE)
    is_fallback = models.BooleanField(default=False, help_text="Receives questions no expert covers.")
    chunk_size = models.PositiveIntegerField(default=1000, help_text="Target characters per chunk.")
    chunk_overlap = models.PositiveIntegerField(default=150, help_text="Characters shared by neighbouring chunks.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name
