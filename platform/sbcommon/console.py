"""Console mixins shared by every app's views.

Only Django here: sbcommon sits below every app, so this module imports none of them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import mixins
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.middleware.csrf import CsrfViewMiddleware

__all__ = ["LoginRequiredMixin", "UploadPageMixin", "csrf_failure", "first_error"]


class LoginRequiredMixin(mixins.LoginRequiredMixin):
    """Django's mixin, except that an htmx request from an expired session reloads the login page.

    A plain redirect would be followed inside the XHR and the login form swapped into a fragment.
    """

    def handle_no_permission(self) -> HttpResponse:
        request = self.request
        if getattr(request, "htmx", False) and not request.user.is_authenticated:
            # Back to the page the user was on, not to the fragment's URL.
            current = urlsplit(request.headers.get("HX-Current-URL", ""))
            next_url = current.path + (f"?{current.query}" if current.query else "") if current.path else request.get_full_path()
            login = redirect_to_login(next_url, self.get_login_url())
            return HttpResponse(status=204, headers={"HX-Redirect": login["Location"]})
        return super().handle_no_permission()


def first_error(form: Any) -> str:
    """The first error of an invalid form, as the page or ``upload.js`` shows it."""
    for errors in form.errors.values():
        if errors:
            return str(errors[0])
    return "The form is not valid."


def csrf_failure(request: HttpRequest) -> HttpResponse | None:
    """Django's CSRF check, run by hand: upload views read the body only after checking its declared size."""
    check = CsrfViewMiddleware(lambda r: HttpResponse())
    check.process_request(request)
    return check.process_view(request, None, (), {})  # type: ignore[arg-type]


class UploadPageMixin:
    """For upload pages that ``upload.js`` posts to: it asks for JSON and follows the answer to the job page."""

    request: HttpRequest

    def _wants_json(self) -> bool:
        return self.request.headers.get("X-Requested-With") == "XMLHttpRequest"
