"""Console forms."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator

from experts.access import visible_slugs

from . import selectors


class PlaygroundForm(forms.Form):
    """A question and the mode to answer it in (``auto``, ``auto:fast`` or one expert's slug)."""

    question = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "How do I renew my driver's license?"}),
        error_messages={"required": "Please enter a question."},
    )
    mode = forms.ChoiceField(initial="auto")

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at form creation, not import, so settings overrides in tests and deployments apply.
        limit = settings.MAX_QUESTION_CHARS
        question = self.fields["question"]
        question.validators.append(MaxLengthValidator(limit))
        question.widget.attrs["maxlength"] = str(limit)
        # A team member may ask their own experts directly; staff (and callers without a user) any expert.
        slugs = None if user is None or user.is_staff else visible_slugs(user)
        self.fields["mode"].choices = selectors.playground_modes(slugs)


class ReviewDecisionForm(forms.Form):
    """Label one queued question with its right expert, or dismiss it (``expert`` empty + ``dismiss``)."""

    request_id = forms.CharField(max_length=64, widget=forms.HiddenInput)
    expert = forms.ChoiceField(required=False, error_messages={"invalid_choice": "Pick one of the experts listed."})
    dismiss = forms.BooleanField(required=False)

    def __init__(self, *args: Any, experts: list[tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["expert"].choices = [("", "— choose the right expert —"), *(experts or [])]

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if not data.get("dismiss") and not data.get("expert"):
            self.add_error("expert", "Choose the expert that should have answered, or dismiss the question.")
        return data


# Only the label-noise type router training implements today ("confusable" needs a confusion matrix it is not given).
NOISE_KINDS = [("uniform", "uniform: flip to a random other expert")]


class TrainRouterForm(forms.Form):
    """The router training parameters a console user may set; the rest keep TrainConfig's defaults."""

    balance_weight = forms.FloatField(
        label="λ (load-balance weight)", initial=0.1, min_value=0.0, max_value=10.0,
        help_text="Weight of the load-balancing loss; higher spreads traffic more evenly across experts.",
    )
    input_noise = forms.FloatField(
        label="Input noise", initial=0.8, min_value=0.0, max_value=2.0,
        help_text="Gaussian noise on training embeddings, relative to their length (0 turns it off).",
    )
    label_noise = forms.FloatField(
        label="Label-noise ratio", initial=0.0, min_value=0.0, max_value=0.5,
        help_text="Share of training labels flipped afresh every epoch (DisturbLabel); 0 turns it off.",
    )
    noise_kind = forms.ChoiceField(label="Label-noise type", choices=NOISE_KINDS, initial="uniform")
    gumbel_temperature = forms.FloatField(
        label="Gumbel logit noise", initial=0.0, min_value=0.0, max_value=5.0, help_text="Temperature of Gumbel noise added to the logits while training; 0 turns it off.",
    )
    hidden_dim = forms.IntegerField(label="Hidden size", initial=256, min_value=128, max_value=512, help_text="Width of the router's hidden layer (128 to 512).")
    epochs = forms.IntegerField(label="Epochs", initial=60, min_value=1, max_value=500, help_text="At most this many; training stops early when validation stops improving.")
    seed = forms.IntegerField(label="Seed", initial=0, min_value=0, max_value=2**31 - 1)

    def params(self) -> dict[str, Any]:
        """The validated values as the training job's parameters."""
        return {key: self.cleaned_data[key] for key in self.fields}
