"""Middleware: a database that is locked or briefly gone gets a few retries, then a clean 503.

SQLite answers "database is locked" when a writer holds it past the busy timeout; PostgreSQL
drops connections on a restart or failover. Either way the request should not die with a 500 and
a traceback. A safe request (GET, HEAD, OPTIONS) is run again after a short backoff on a fresh
connection, since running it twice changes nothing; an unsafe one is never replayed (it may have
written half of its work outside a transaction) and is answered 503 at once. Either way the
answer is 503 with ``Retry-After`` and the API's error body, so clients retry later.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.db import OperationalError, close_old_connections, connections
from django.db.utils import InterfaceError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.http.request import RawPostDataException

from .logfilters import sensitive

logger = logging.getLogger(__name__)

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
# What a driver says when the database is busy or away (SQLite, psycopg); anything else is a bug and stays a 500.
TRANSIENT_MARKERS = (
    "database is locked", "database table is locked", "unable to open database", "disk i/o error",
    "connection", "server closed", "terminating connection", "could not connect", "the database system is",
    "timeout expired", "ssl syscall", "no route to host",
)


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` means the database is busy or unreachable, rather than a query that is wrong."""
    if isinstance(exc, InterfaceError):
        return True
    if not isinstance(exc, OperationalError):
        return False
    message = str(exc).lower()
    return any(marker in message for marker in TRANSIENT_MARKERS)


def unavailable_response(request: HttpRequest, retry_after: int) -> HttpResponse:
    """503 with ``Retry-After``: the API's error body for API clients, a short page for people."""
    message = "The database is busy or unavailable; try again in a few seconds."
    if request.path.startswith(("/api/", "/v1/")) or "application/json" in request.headers.get("accept", ""):
        # OpenAI's four keys, as every error of the chat API has them; the code tells this 503 from the others.
        body = {"type": "service_unavailable", "code": "database_unavailable", "message": message, "param": None, "details": None}
        response: HttpResponse = JsonResponse({"error": body}, status=503)
    else:
        response = HttpResponse(f"<!doctype html><title>Unavailable</title><h1>Temporarily unavailable</h1><p>{message}</p>", status=503)
    response["Retry-After"] = str(retry_after)
    return response


def _reset_connections() -> None:
    """Drop broken connections so the next attempt opens a fresh one.

    A connection inside a transaction block is left alone: closing it would only mark the block
    for rollback (its owner, e.g. a test or an ``atomic`` caller, handles the error).
    """
    for conn in connections.all(initialized_only=True):
        if conn.in_atomic_block:
            continue
        try:
            conn.close()
        except Exception:  # closing a dead connection may itself fail; it is being discarded anyway
            logger.debug("db.close_failed", exc_info=True)
    close_old_connections()


class DatabaseUnavailableMiddleware:
    """Retry safe requests on a transient database error, then answer 503 (see the module docstring).

    Place it last in ``MIDDLEWARE``: it calls the view itself (``process_view``) so that it can call
    it again, and catches what escapes from later rendering (``process_exception``).
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response
        self.attempts = max(1, settings.DB_UNAVAILABLE_RETRIES)
        self.backoff = settings.DB_UNAVAILABLE_BACKOFF_S
        self.retry_after = settings.DB_UNAVAILABLE_RETRY_AFTER_S

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Callable[..., Any], args: tuple, kwargs: dict) -> HttpResponse | None:
        if request.method not in SAFE_METHODS:
            return None  # an unsafe request runs once, normally; process_exception turns a transient failure into a 503
        if iscoroutinefunction(view):
            return None  # an async view is awaited by Django itself; only process_exception applies
        for attempt in range(1, self.attempts + 1):
            try:
                response = view(request, *args, **kwargs)
                if hasattr(response, "render") and callable(response.render) and not getattr(response, "is_rendered", True):
                    response = response.render()  # lazy templates query the database too: inside the retry
                return response
            except Exception as exc:
                if not is_transient(exc):
                    raise
                logger.warning("db.transient_error", extra={"attempt": attempt, "path": request.path, "error": exc.__class__.__name__})
                _reset_connections()
                if attempt < self.attempts:
                    time.sleep(self.backoff * (2 ** (attempt - 1)))
        return unavailable_response(request, self.retry_after)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not is_transient(exception):
            return None
        logger.warning("db.unavailable", extra={"path": request.path, "method": request.method, "error": exception.__class__.__name__})
        _reset_connections()
        return unavailable_response(request, self.retry_after)


class SecurityHeadersMiddleware:
    """Headers Django does not send itself: ``Content-Security-Policy`` and ``Permissions-Policy`` (from settings)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        policy = settings.CONTENT_SECURITY_POLICY
        exempt = tuple(settings.CONTENT_SECURITY_POLICY_EXEMPT)
        if policy and not request.path.startswith(exempt) and "Content-Security-Policy" not in response:
            response["Content-Security-Policy"] = policy
        permissions = settings.PERMISSIONS_POLICY
        if permissions and "Permissions-Policy" not in response:
            response["Permissions-Policy"] = permissions
        return response


def _strings(value: Any, depth: int = 0) -> Iterator[str]:
    """Every string in a parsed JSON body (bounded depth: bodies are small, but be safe)."""
    if depth > 8:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item, depth + 1)
    elif isinstance(value, list):
        for item in value[:200]:
            yield from _strings(item, depth + 1)


class PersonalDataMiddleware:
    """Registers the strings of a JSON request body as sensitive for the request, so no log line carries them.

    Chat messages and questions arrive as JSON; ``sbcommon.logfilters`` masks them wherever they
    would be logged (error messages, tracebacks, extra fields) while the request runs.
    """

    MAX_BODY = 2 * 1024 * 1024

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        texts: list[str] = []
        if request.method in ("POST", "PUT", "PATCH") and request.content_type == "application/json":
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if 0 < length <= min(self.MAX_BODY, settings.DATA_UPLOAD_MAX_MEMORY_SIZE or self.MAX_BODY):
                try:
                    texts = list(_strings(json.loads(request.body)))
                except (ValueError, UnicodeDecodeError, RawPostDataException):
                    texts = []  # not JSON after all: the view answers 400, nothing to remember
        with sensitive(texts):
            return self.get_response(request)
