"""Authentication, permissions and rate limits of the chat-facing API (``/v1/*`` and ``/api/v1/route``).

Every chat-facing view inherits ``ChatApiMixin``. A Bearer API key is always checked (a bad one is a
401 ``invalid_api_key`` even when the API is open); with ``CHAT_API_REQUIRE_AUTH`` a caller needs a key
or a signed-in user. Each key, and each anonymous address, has its own per-minute limit (429 with
``Retry-After``). ``allowed_experts(request)`` gives the experts the caller may ask
(``experts.access.askable_slugs``).
"""

from __future__ import annotations

import logging
import math
import time

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions, throttling

from clients.models import ApiKey
from clients.services import InvalidApiKey
from clients.services import authenticate as authenticate_key
from experts.access import Principal, askable_slugs
from sbcommon.api import ApiError

from .. import metrics

BEARER_REALM = 'Bearer realm="switchboard"'
logger = logging.getLogger(__name__)


class InvalidApiKeyError(ApiError):
    """401 with OpenAI's ``invalid_api_key`` code."""

    def __init__(self, message: str):
        super().__init__(message, status_code=401, code="invalid_api_key")
        self.auth_header = BEARER_REALM


class RateLimited(ApiError):
    """429 with a ``Retry-After`` header (DRF sets it from ``wait``)."""

    def __init__(self, message: str, wait: float):
        super().__init__(message, status_code=429, code="rate_limit_exceeded")
        self.wait = max(1, math.ceil(wait))


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer sk-sb-...``: ``request.user`` stays anonymous, ``request.auth`` is the ApiKey.

    Other schemes (Basic) are left to the next authenticator.
    """

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, secret = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        secret = secret.strip()
        if not secret:
            metrics.ERRORS.labels(kind="invalid_api_key").inc()
            raise InvalidApiKeyError("Empty bearer token: send Authorization: Bearer sk-sb-...")
        try:
            key = authenticate_key(secret)
        except InvalidApiKey as exc:
            metrics.ERRORS.labels(kind="invalid_api_key").inc()
            raise InvalidApiKeyError(str(exc)) from exc
        from django.contrib.auth.models import AnonymousUser

        return AnonymousUser(), key

    def authenticate_header(self, request) -> str:
        return BEARER_REALM


class ChatPermission(permissions.BasePermission):
    """Open on a single-machine install (``CHAT_API_REQUIRE_AUTH=false``); else a valid API key or a signed-in user."""

    def has_permission(self, request, view) -> bool:
        if isinstance(request.auth, ApiKey):
            return True
        return not settings.CHAT_API_REQUIRE_AUTH or bool(request.user and request.user.is_authenticated)


class PerKeyRateThrottle(throttling.BaseThrottle):
    """A fixed one-minute window per API key (its own limit) or per anonymous address.

    The counter is one atomic ``cache.incr`` per request (LocMem per process on one machine; with
    ``REDIS_URL`` one counter shared by every web process). A fixed window can let through up to
    twice the limit across a window boundary; that is the usual trade for one atomic operation.
    Signed-in console users are not limited. When the cache is unreachable the request is served
    (and counted in ``switchboard_errors_total{kind="rate_limit_cache_unavailable"}``).
    """

    WINDOW_S = 60

    def allow_request(self, request, view) -> bool:
        key = request.auth if isinstance(request.auth, ApiKey) else None
        if key is not None:
            limit, ident = key.rate_limit_per_minute, f"key:{key.pk}"
        elif request.user and request.user.is_authenticated:
            return True
        else:
            limit, ident = settings.CHAT_API_ANON_RATE_PER_MINUTE, f"addr:{self.get_ident(request)}"
        if limit <= 0:
            return True
        now = time.time()
        window = int(now // self.WINDOW_S)
        name = f"sb:throttle:{ident}:{window}"
        try:
            count = self._count(name)
        except Exception:  # the cache (Redis) is down: serve rather than refuse everyone, and say so
            logger.warning("rate limiting skipped: the cache is unreachable", exc_info=True)
            metrics.ERRORS.labels(kind="rate_limit_cache_unavailable").inc()
            return True
        if count <= limit:
            return True
        self._wait = (window + 1) * self.WINDOW_S - now
        request._switchboard_rate_limit = limit  # DRF makes new throttle objects; the view's message reads it here
        return False

    def _count(self, name: str) -> int:
        # add() is a no-op when the counter exists; incr() is atomic in LocMem and Redis.
        cache.add(name, 0, timeout=self.WINDOW_S + 5)
        try:
            return cache.incr(name)
        except ValueError:  # expired between add and incr: start the window again
            cache.set(name, 1, timeout=self.WINDOW_S + 5)
            return 1

    def wait(self) -> float | None:
        return getattr(self, "_wait", None)


class ChatApiMixin:
    """Authentication, permission and throttle classes shared by the chat-facing views."""

    authentication_classes = [ApiKeyAuthentication, authentication.SessionAuthentication, authentication.BasicAuthentication]
    permission_classes = [ChatPermission]
    throttle_classes = [PerKeyRateThrottle]

    def throttled(self, request, wait):
        metrics.ERRORS.labels(kind="rate_limited").inc()
        limit = getattr(request, "_switchboard_rate_limit", "?")
        who = "this API key" if isinstance(request.auth, ApiKey) else "this address"
        raise RateLimited(f"Rate limit reached for {who}: {limit} requests per minute. Retry after {math.ceil(wait or 1)} s.", wait or 1)

    def permission_denied(self, request, message=None, code=None):
        if not request.successful_authenticator and not isinstance(request.auth, ApiKey):
            metrics.ERRORS.labels(kind="unauthenticated").inc()
            raise exceptions.NotAuthenticated(
                "This API needs an API key (Authorization: Bearer sk-sb-..., created in the console under API keys) or a signed-in user."
            )
        super().permission_denied(request, message=message, code=code)

    def finalize_response(self, request, response, *args, **kwargs):
        """Every error body carries OpenAI's four keys (``param`` and ``code`` may be null)."""
        response = super().finalize_response(request, response, *args, **kwargs)
        error = getattr(response, "data", None)
        error = error.get("error") if isinstance(error, dict) else None
        if isinstance(error, dict) and response.status_code >= 400:
            if error.get("type") in ("invalid_api_key", "rate_limit_exceeded"):
                error.setdefault("code", error["type"])  # OpenAI's clients read the reason from ``code``
            error.setdefault("param", None)
            error.setdefault("code", None)
        match = getattr(request, "resolver_match", None)
        metrics.observe_response(match.url_name if match and match.url_name else type(self).__name__, response.status_code)
        return response


def allowed_experts(request) -> set[str]:
    """The expert slugs the caller may ask (``experts.access``), read once per request."""
    cached = getattr(request, "_switchboard_allowed", None)
    if cached is None:
        cached = askable_slugs(Principal.of(request))
        request._switchboard_allowed = cached
    return cached


def user_id(request) -> int | None:
    """The id of the signed-in user asking without a key (their conversations and responses are theirs), if any."""
    return Principal.of(request).user_id


def api_key_id(request) -> int | None:
    """The id of the API key that authenticated ``request`` (for routing events), if any."""
    key = getattr(request, "auth", None)
    return key.pk if isinstance(key, ApiKey) else None


class ApiKeyAuthenticationScheme(OpenApiAuthenticationExtension):
    """Describes API keys in the OpenAPI schema (HTTP bearer), so clients generated from it send them."""

    target_class = "serving.api.auth.ApiKeyAuthentication"
    name = "ApiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "bearerFormat": "sk-sb-...", "description": "An API key created in the console (Keys)."}
