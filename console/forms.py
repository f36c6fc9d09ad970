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

