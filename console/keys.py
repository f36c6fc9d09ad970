"""Console pages for API keys: list, create (the secret is shown once), revoke with confirmation.

Staff see, create and revoke every key, scoped or not; a team member sees and revokes the keys they
created and creates keys scoped to at least one expert they can edit (an unscoped key is staff's to
grant); anyone else sees an empty list. They live in the console, not ``clients``, because the scope
rule needs the experts app, which sits above ``clients``.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from clients.models import ApiKey
from clients.selectors import keys_for
from clients.services import create_key, revoke_key
from experts.access import editable_slugs
from sbcommon.console import LoginRequiredMixin


def grantable_slugs(user) -> list[str]:
    """Expert slugs ``user`` may scope a key to: the experts they can edit."""
    return sorted(editable_slugs(user))


class ApiKeyForm(forms.Form):
    """A new key: its name, the experts it may reach and its rate limit."""

    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. the front end that uses it.")
    scopes = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple,
                                       help_text="The experts the key may reach. None checked: every expert (staff only).")
    rate_limit_per_minute = forms.IntegerField(min_value=0, max_value=1_000_000, label="Requests per minute",
                                               help_text="0 means unlimited.")

    def __init__(self, *args: Any, user=None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["scopes"].choices = [(s, s) for s in grantable_slugs(user)]
        self.fields["rate_limit_per_minute"].initial = settings.API_KEY_DEFAULT_RATE_PER_MINUTE

    def clean_scopes(self) -> list[str]:
        scopes = list(self.cleaned_data.get("scopes") or [])
        if not scopes and not self.user.is_staff:
            raise forms.ValidationError("Choose at least one expert: a key without scopes reaches every expert, which only staff may grant.")
        return scopes


def _list_context(request: HttpRequest, form: ApiKeyForm | None = None) -> dict[str, Any]:
    can_create = request.user.is_staff or bool(grantable_slugs(request.user))
    return {
        "keys": keys_for(request.user),
        "form": form or (ApiKeyForm(user=request.user) if can_create else None),
        "can_create": can_create,
    }


class KeyListView(LoginRequiredMixin, View):
    """The keys the user may see, and the form to create one."""

    def get(self, request: HttpRequest) -> HttpResponse:
        return render(request, "console/key_list.html", _list_context(request))


class KeyCreateView(LoginRequiredMixin, View):
    """Create a key and show its secret once; the page is never cached and the secret never stored."""

    def post(self, request: HttpRequest) -> HttpResponse:
        if not (request.user.is_staff or grantable_slugs(request.user)):
            raise PermissionDenied("you can edit no expert, so you cannot create API keys; ask staff")
        form = ApiKeyForm(request.POST, user=request.user)
        if not form.is_valid():
            return render(request, "console/key_list.html", _list_context(request, form), status=400)
        data = form.cleaned_data
        created = create_key(data["name"], scopes=data["scopes"], rate_limit_per_minute=data["rate_limit_per_minute"], created_by=request.user)
        response = render(request, "console/key_created.html", {"key": created.key, "secret": created.secret})
        response["Cache-Control"] = "no-store"
        return response


class KeyRevokeView(LoginRequiredMixin, View):
    """Confirm (GET), then revoke (POST) a key the user may see."""

    def _key(self, request: HttpRequest, pk: int) -> ApiKey:
        return get_object_or_404(keys_for(request.user), pk=pk)

    def get(self, request: HttpRequest, pk: int) -> HttpResponse:
        return render(request, "console/key_revoke.html", {"key": self._key(request, pk)})

    def post(self, request: HttpRequest, pk: int) -> HttpResponse:
        key = revoke_key(self._key(request, pk))
        messages.success(request, f"Revoked {key.name} ({key.prefix}…): clients using it now get 401.")
        return redirect("console-keys")
