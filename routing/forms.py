"""Console forms."""

from __future__ import annotations

from typing import Any

from django import forms

# The only label-noise type router training implements (``routing.ml.training.inject_label_noise``).
NOISE_KINDS = [("uniform", "uniform: flip to a random other expert")]


class TrainRouterForm(forms.Form):
    """The router training parameters a console user may set; the rest keep TrainConfig's defaults.

    ``activation`` says how the new version goes live (shown first, in plain words); the others are
    the "Advanced" settings.
    """

    activation = forms.ChoiceField(
        label="When it is trained", initial="if_better", widget=forms.RadioSelect,
        choices=[
            ("if_better", "Start routing with it only if it sends held-out questions to the right expert more often than the current router"),
            ("never", "Keep it as a candidate: I will compare it and switch to it myself"),
            ("always", "Start routing with it straight away"),
        ],
    )

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
    typo_rate = forms.FloatField(
        label="Typo practice", initial=0.1, min_value=0.0, max_value=0.3,
        help_text="Share of letters misspelt in the copy of each question the router also learns from (0: no copies).",
    )
    char_view = forms.BooleanField(
        label="Read spelling too", initial=True, required=False,
        help_text="Blend a view of the question's letters (character n-grams) with its meaning; it keeps misspelt questions on course.",
    )
    hidden_dim = forms.IntegerField(label="Hidden size", initial=256, min_value=128, max_value=512, help_text="Width of the router's hidden layer (128 to 512).")
    epochs = forms.IntegerField(label="Epochs", initial=60, min_value=1, max_value=500, help_text="At most this many; training stops early when validation stops improving.")
    seed = forms.IntegerField(label="Seed", initial=0, min_value=0, max_value=2**31 - 1)

    def params(self) -> dict[str, Any]:
        """The validated values as the training job's parameters."""
        return {key: self.cleaned_data[key] for key in self.fields}
