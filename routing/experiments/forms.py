"""The new-experiment form."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings

from experts.access import editable_slugs, visible_experts

from . import selectors
from .choices import Design, ExperimentKind, Metric, Unit


def experiment_form(user: Any, data: Any = None) -> ExperimentForm:
    """The new-experiment form offering the experts ``user`` may change (and the router's versions to staff)."""
    editable = visible_experts(user).filter(slug__in=editable_slugs(user))
    experts, router = selectors.experiment_choices(editable, include_router=user.is_staff)
    return ExperimentForm(data, experts=experts, router_versions=router)


class ExperimentForm(forms.Form):
    """What an experiment compares and how it is read; the service checks versions, overlap and the plan.

    The expert and the versions are picked from lists (the versions grouped by expert, and the
    router's); the statistical settings (``ADVANCED``) keep their defaults unless opened.
    """

    ADVANCED = ("split", "unit", "primary_metric", "design", "baseline", "min_effect", "alpha", "power")

    name = forms.CharField(max_length=128, required=False, help_text="Optional: what you are trying out, in your words.")
    kind = forms.ChoiceField(choices=ExperimentKind.choices, initial=ExperimentKind.EXPERT, label="Compare")
    expert = forms.ChoiceField(required=False, help_text="The expert whose two versions answer (for an expert experiment).")
    control_version = forms.TypedChoiceField(coerce=int, label="Version A (today's)", help_text="Usually the version serving now.")
    treatment_version = forms.TypedChoiceField(coerce=int, label="Version B (the challenger)", help_text="The candidate to try on part of the traffic.")
    split = forms.FloatField(initial=0.5, help_text="Share of conversations in the treatment arm, strictly between 0 and 1.")
    unit = forms.ChoiceField(choices=Unit.choices, initial=Unit.CONVERSATION)
    primary_metric = forms.ChoiceField(choices=Metric.choices, initial=Metric.THUMBS_UP)
    design = forms.ChoiceField(choices=Design.choices, initial=Design.SEQUENTIAL)
    baseline = forms.FloatField(initial=0.6, help_text="Expected control rate of the primary metric (for the power calculation).")
    min_effect = forms.FloatField(initial=settings.EXPERIMENT_MIN_EFFECT, help_text="Relative improvement worth detecting (0.05 = +5%).")
    alpha = forms.FloatField(initial=settings.EXPERIMENT_ALPHA)
    power = forms.FloatField(initial=settings.EXPERIMENT_POWER)

    def __init__(self, *args: Any, experts: list[tuple[str, str, list[tuple[int, str]]]] | None = None,
                 router_versions: list[tuple[int, str]] | None = None, **kwargs: Any):
        """``experts``: (slug, name, [(version, label)]) the user may experiment on; ``router_versions``: [(version, label)]."""
        super().__init__(*args, **kwargs)
        experts = experts or []
        self.fields["expert"].choices = [("", "choose an expert"), *((slug, name) for slug, name, _ in experts)]
        groups: list[tuple[str, Any]] = [(name, [(v, f"{name}: {label}") for v, label in versions]) for _, name, versions in experts if versions]
        if router_versions:
            groups.append(("Router", [(v, f"router: {label}") for v, label in router_versions]))
        for field in ("control_version", "treatment_version"):
            self.fields[field].choices = [("", "choose a version"), *groups]
        self.versions = {slug: {v for v, _ in versions} for slug, _, versions in experts}

    def advanced_fields(self) -> list[Any]:
        return [self[name] for name in self.ADVANCED]

    def main_fields(self) -> list[Any]:
        return [self[name] for name in self.fields if name not in self.ADVANCED]

    def clean_split(self) -> float:
        split = self.cleaned_data["split"]
        if not 0 < split < 1:
            raise forms.ValidationError("The split must send traffic to both arms: a treatment share strictly between 0 and 1 (0/100 is not an experiment).")
        return split

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("kind") == ExperimentKind.EXPERT:
            slug = data.get("expert")
            if not slug:
                self.add_error("expert", "Choose the expert whose versions you want to compare.")
            else:
                for field in ("control_version", "treatment_version"):
                    if field in data and data[field] not in self.versions.get(slug, set()):
                        self.add_error(field, f"{slug} has no version {data[field]}: choose one of its own versions.")
        return data
