"""API helpers shared by every app: the error shape and the exception handler.

Every API error is ``{"error": {"type": ..., "message": ..., "details": ...}}`` with a 4xx status
that says what went wrong; the OpenAI-compatible endpoints use the same ``error`` key, as OpenAI does.
"""

from __future__ import annotations

import copy
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.http import Http404
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from .uploads import declared_over_limit


class ApiError(exceptions.APIException):
    """An error raised by a service with a status code and a user-facing message."""

    status_code = status.HTTP_400_BAD_REQUEST
    default_code = "invalid_request_error"

    def __init__(self, message: str, *, status_code: int = 400, code: str = "invalid_request_error", param: str | None = None):
        super().__init__(detail=message, code=code)
        self.status_code = status_code
        self.param = param


def refuse_declared_over(request: Any, limit: int, param: str) -> None:
    """A 413 for an upload that declares more than ``limit`` bytes, before its body is read, let alone stored."""
    length = declared_over_limit(request.META, limit)
    if length is not None:
        raise ApiError(f"the upload is {length:,} bytes; the limit is {limit:,} bytes", status_code=413, code="file_too_large", param=param)


class LeanSerializer(serializers.Serializer):
    """A request serializer whose fields are shallow copies of the declared ones.

    DRF deep-copies every declared field for every serializer instance (a measurable share of a chat
    request's CPU, docs/EVALUATIONS.md); the hot request serializers change no field and binding sets
    only the copy's own attributes, so a shallow copy is enough. Nested serializers are then shared
    between requests: fine for validation, which keeps no state on them.
    """

    def get_fields(self) -> dict[str, serializers.Field]:
        return {name: copy.copy(field) for name, field in self._declared_fields.items()}


def _flatten(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, dict):
        def name(key: Any) -> str:
            if key == "non_field_errors":
                return ""
            return f"{prefix}.{key}" if prefix else str(key)

        return [line for key, value in detail.items() for line in _flatten(value, name(key))]
    if isinstance(detail, list):
        return [line for item in detail for line in _flatten(item, prefix)]
    return [f"{prefix}: {detail}" if prefix else str(detail)]


def error_body(message: str, *, type_: str = "invalid_request_error", param: str | None = None, details: Any = None) -> dict[str, Any]:
    """The JSON body of an error response."""
    body: dict[str, Any] = {"type": type_, "message": message}
    if param is not None:
        body["param"] = param
    if details is not None:
        body["details"] = details
    return {"error": body}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF exception handler that turns every known error into the ``error`` shape."""
    if isinstance(exc, RequestDataTooBig):
        from django.conf import settings

        message = f"Request body is too large: the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."
        return Response(error_body(message, type_="request_too_large"), status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    # DRF answers Django's own exceptions with its equivalents; describe them the same way.
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(*exc.args) if exc.args else exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(*exc.args) if exc.args else exceptions.PermissionDenied()
    if isinstance(exc, exceptions.ParseError):
        message = f"Malformed request body: {exc.detail}"
        type_ = "invalid_request_error"
    elif isinstance(exc, exceptions.ValidationError):
        message = "; ".join(_flatten(exc.detail)) or "Invalid request."
        type_ = "invalid_request_error"
    elif isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        message, type_ = str(exc.detail), "authentication_error"
    elif isinstance(exc, exceptions.PermissionDenied):
        message, type_ = str(exc.detail), "permission_error"
    elif isinstance(exc, exceptions.NotFound):
        message, type_ = str(exc.detail), "not_found_error"
    elif isinstance(exc, ApiError):
        message, type_ = str(exc.detail), exc.default_code if not getattr(exc.detail, "code", None) else str(exc.detail.code)
    else:
        message, type_ = str(getattr(exc, "detail", exc)), "api_error"
    details = exc.detail if isinstance(exc, exceptions.ValidationError) else None
    response.data = error_body(message, type_=type_, param=getattr(exc, "param", None), details=details)
    return response
