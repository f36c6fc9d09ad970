"""Console forms."""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.core.validators import MaxLengthValidator

from experts.access import Principal, askable_slugs
from serving import conversations

from . import selectors


class PlaygroundForm(forms.Form):
    """A question and the mode to answer it in (``auto``, ``auto:fast`` or one expert's slug)."""

    question = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "placeholder": "How do I renew my driver's license?"}),
        error_messages={"required": "Please enter a question."},
    )
    mode = forms.ChoiceField(initial="auto")
    # A follow-up: the conversation the earlier answers belong to, and the questions asked in it (one a line,
    # the last ``CONTEXT_TURNS`` kept), which route and search the next question as an API client's messages do.
    conversation_id = forms.CharField(required=False, widget=forms.HiddenInput)
    earlier = forms.CharField(required=False, widget=forms.HiddenInput)

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Read at form creation, not import, so settings overrides in tests and deployments apply.
        limit = settings.MAX_QUESTION_CHARS
        question = self.fields["question"]
        question.validators.append(MaxLengthValidator(limit))
        question.widget.attrs["maxlength"] = str(limit)
        # The playground asks as its user, by the one access rule: the router, retrieval and the mode list see only what they may ask.
        self.principal = Principal(user=user)
        self.allowed = askable_slugs(self.principal)
        self.fields["mode"].choices = selectors.playground_modes(self.allowed)

    def clean_conversation_id(self) -> str:
        value = self.cleaned_data.get("conversation_id") or ""
        if value and not conversations.ID_PATTERN.match(value):
            raise forms.ValidationError("This conversation cannot be continued; start a new one.")
        return value

    def clean_earlier(self) -> list[str]:
        limit = settings.MAX_QUESTION_CHARS
        lines = [line.strip()[:limit] for line in (self.cleaned_data.get("earlier") or "").splitlines() if line.strip()]
        return lines[-conversations.CONTEXT_TURNS :]

    def ask(self) -> dict[str, Any]:
        """The chat request's fields for the cleaned form: the question, the mode, the conversation so far, and who asks."""
        data = self.cleaned_data
        return {"question": data["question"], "model": data["mode"], "conversation_id": data.get("conversation_id") or "",
                "history": [{"role": "user", "content": q} for q in data.get("earlier") or []],
                "allowed": self.allowed, "user_id": self.principal.user_id}


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

