"""Serializers of the routing API: router versions with their figures and activation verdict, and a training's parameters."""

from __future__ import annotations

from typing import Any

from django import forms
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..experiments.forms import ExperimentForm
from ..experiments.models import Experiment
from ..forms import TrainRouterForm
from ..models import RouterVersion


def serializer_from_form(form_class: type[forms.Form], name: str) -> type[serializers.Serializer]:
    """A serializer with the form's fields, ranges, choices and defaults, for the schema: the form itself validates."""
    fields: dict[str, serializers.Field] = {}
    for key, field in form_class.base_fields.items():
        common: dict[str, Any] = {"required": False, "help_text": str(field.help_text or field.label or "")}
        if field.initial is not None:
            common["default"] = field.initial
        if isinstance(field, forms.TypedChoiceField) and field.coerce is int:
            fields[key] = serializers.IntegerField(**common)
        elif isinstance(field, forms.ChoiceField):
            fields[key] = serializers.ChoiceField(choices=field.choices, **common) if field.choices else serializers.CharField(**common)
        elif isinstance(field, forms.BooleanField):
            fields[key] = serializers.BooleanField(**common)
        elif isinstance(field, forms.IntegerField | forms.FloatField):
            kind = serializers.FloatField if isinstance(field, forms.FloatField) else serializers.IntegerField
            fields[key] = kind(min_value=field.min_value, max_value=field.max_value, **common)
        else:
            fields[key] = serializers.CharField(**common)
    return type(name, (serializers.Serializer,), fields)


TrainSerializer = serializer_from_form(TrainRouterForm, "TrainRouterSerializer")
NewExperimentSerializer = serializer_from_form(ExperimentForm, "NewExperimentSerializer")


class ExperimentSerializer(serializers.ModelSerializer):
    expert = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Experiment
        fields = ["id", "name", "kind", "expert", "control_version", "treatment_version", "split", "unit", "primary_metric", "design",
                  "baseline", "min_effect", "alpha", "power", "plan", "status", "winner", "decision", "created_at", "started_at", "ended_at"]


class RouterVersionSerializer(serializers.ModelSerializer):
    """A router version, its validation figures and why it serves or not (the activation verdict).

    ``experts`` lists the experts the caller may see; ``other_experts`` counts the rest.
    """

    experts = serializers.SerializerMethodField()
    other_experts = serializers.SerializerMethodField()
    validation = serializers.SerializerMethodField(help_text="Agreement with the reviewed labels on the validation split: accuracy, macro_f1 ...")
    gate = serializers.SerializerMethodField(help_text="Accuracy on the held-out gate questions that neither router trained or tuned on.")
    verdict = serializers.SerializerMethodField(help_text="How it went live or why not: reason in words, the policy and the figures compared.")
    training_run = serializers.SerializerMethodField()

    class Meta:
        model = RouterVersion
        fields = ["version", "is_active", "created_at", "embedding_model", "experts", "other_experts", "validation", "gate", "verdict", "training_run"]

    def _hidden(self) -> frozenset[str]:
        return self.context["hidden"]

    def get_experts(self, version: RouterVersion) -> list[str]:
        return [s for s in version.experts or [] if s not in self._hidden()]

    def get_other_experts(self, version: RouterVersion) -> int:
        return sum(1 for s in version.experts or [] if s in self._hidden())

    @extend_schema_field(serializers.DictField())
    def get_validation(self, version: RouterVersion) -> dict[str, Any]:
        val = (version.metrics or {}).get("val")
        return {k: v for k, v in val.items() if isinstance(v, int | float)} if isinstance(val, dict) else {}

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_gate(self, version: RouterVersion) -> dict[str, Any] | None:
        return (version.metrics or {}).get("gate")

    @extend_schema_field(serializers.DictField(allow_null=True))
    def get_verdict(self, version: RouterVersion) -> dict[str, Any] | None:
        return self.context["redact"]((version.metrics or {}).get("activation"))

    def get_training_run(self, version: RouterVersion) -> int | None:
        return version.training_runs.values_list("pk", flat=True).first()
