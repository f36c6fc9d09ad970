"""Creating, revoking and authenticating API keys.

A key is ``sk-sb-`` followed by 43 URL-safe characters from ``secrets`` (256 random bits). Only the
SHA-256 of the whole key is stored. A fast unsalted hash is the right tool here, unlike for
passwords: slow salted hashes (PBKDF2, argon2) protect *low-entropy* secrets against guessing,
but nobody can enumerate 2^256 keys whatever the hash costs; and an unsalted digest lets
``authenticate`` find the key with one indexed lookup per request instead of checking every row.

Scope validation (which experts a user may scope a key to) needs the experts app, which sits
above this one; ``console.keys`` does it before calling ``create_key``.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from .models import ApiKey

KEY_PREFIX = "sk-sb-"
PREFIX_SHOWN = len(KEY_PREFIX) + 6  # "sk-sb-" and six characters of the secret: enough to tell keys apart
MAX_KEY_CHARS = 200  # anything longer is not one of ours; refuse before hashing megabytes


class InvalidApiKey(Exception):
    """The presented key is unknown, malformed or revoked, or its owner's account is gone or inactive."""


@dataclass(frozen=True)
class CreatedKey:
    """A new key and its secret: the only moment the plaintext exists outside the client."""

    key: ApiKey
    secret: str


def hash_key(secret: str) -> str:
    """SHA-256 hex digest of a whole key (see the module docstring for why no salt or stretching)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def create_key(name: str, *, scopes: list[str] | None = None, rate_limit_per_minute: int | None = None, created_by=None) -> CreatedKey:
    """Create a key and return it with its secret (shown once; only the hash is stored).

    Args:
        name: what the key is for (1-100 characters).
        scopes: expert slugs the key may reach; empty or None means every expert. Callers check
            that the creating user may grant them.
        rate_limit_per_minute: requests per minute (0 = unlimited; default ``API_KEY_DEFAULT_RATE_PER_MINUTE``).
        created_by: the user creating it.
    """
    name = (name or "").strip()
    if not name or len(name) > 100:
        raise ValueError("a key needs a name of 1 to 100 characters")
    rate = settings.API_KEY_DEFAULT_RATE_PER_MINUTE if rate_limit_per_minute is None else int(rate_limit_per_minute)
    if rate < 0:
        raise ValueError("the rate limit cannot be negative")
    clean_scopes = sorted({s.strip() for s in scopes or [] if s and s.strip()})
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey.objects.create(
        name=name, prefix=secret[:PREFIX_SHOWN], key_hash=hash_key(secret), scopes=clean_scopes,
        rate_limit_per_minute=rate, created_by=created_by,
    )
    return CreatedKey(key=key, secret=secret)


def revoke_key(key: ApiKey) -> ApiKey:
    """Revoke ``key`` now (idempotent: a revoked key keeps its first revocation time)."""
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    key.refresh_from_db()
    return key


def authenticate(secret: str) -> ApiKey:
    """The active key matching ``secret``.

    Raises:
        InvalidApiKey: malformed, unknown or revoked (the message says which, never echoing the key).
    """
    if not secret.startswith(KEY_PREFIX) or len(secret) > MAX_KEY_CHARS:
        raise InvalidApiKey("Incorrect API key provided: Switchboard keys start with sk-sb-.")
    digest = hash_key(secret)
    key = ApiKey.objects.filter(key_hash=digest).select_related("created_by").first()
    # The lookup is by digest; compare again in constant time so the answer cannot leak timing.
    if key is None or not hmac.compare_digest(key.key_hash, digest):
        raise InvalidApiKey(f"Incorrect API key provided: {secret[:PREFIX_SHOWN]}…; create one in the console (API keys).")
    if key.revoked_at is not None:
        raise InvalidApiKey(f"The API key {key.prefix}… was revoked on {key.revoked_at:%Y-%m-%d %H:%M} UTC.")
    # A key acts for the user who created it: it stops working with their account (experts.access narrows it to their teams).
    if key.created_by is None or not key.created_by.is_active:
        raise InvalidApiKey(f"The API key {key.prefix}… belongs to an account that is no longer active; create a new key.")
    _touch(key)
    return key


def _touch(key: ApiKey) -> None:
    """Record use cheaply: one conditional UPDATE at most every ``KEY_LAST_USED_RESOLUTION_S`` per key."""
    now = timezone.now()
    resolution = timedelta(seconds=settings.KEY_LAST_USED_RESOLUTION_S)
    if key.last_used_at is not None and now - key.last_used_at < resolution:
        return
    ApiKey.objects.filter(pk=key.pk).filter(Q(last_used_at__isnull=True) | Q(last_used_at__lt=now - resolution)).update(last_used_at=now)
    key.last_used_at = now
