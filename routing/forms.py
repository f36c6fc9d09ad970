"""Console forms."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator

from . import selectors


class PlaygroundForm(forms.Form):
    """A question and the mode to answer it in (``auto``, ``auto:fast`` or one expert's slug)."""

    question = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "How do I renew my driver's license?"}),
        error_messages={"required": "Please enter a question."},
    )
    mode = forms.ChoiceField(initial="auto")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at form creation, not import, so settings overrides in tests and deployments apply.
        limit = settings.MAX_QUESTION_CHARS
        question = self.fields["question"]
        question.validators.append(MaxLengthValidator(limit))
        question.widget.attrs["maxlength"] = str(limit)
        self.fields["mode"].choices = selectors.playground_modes()
