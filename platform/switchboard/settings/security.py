"""Security: production hardening, cookies and sessions, HTTPS, response headers, the audit log.

Evaluated after every other topic but logging, as it always was: it reads ``DEBUG`` and refuses a
production start without a secret key from the environment.
"""

from __future__ import annotations

from sbcommon.env import envbool, envint, envstr

from .core import DEBUG

# --- production hardening ---------------------------------------------------------------------
# SWITCHBOARD_ENV=production turns on every hardening below by default (each still overridable) and
# refuses to start without SECRET_KEY from the environment. Anything else is a development install.
SWITCHBOARD_ENV = envstr("SWITCHBOARD_ENV", "development")
_PRODUCTION = SWITCHBOARD_ENV == "production"
if _PRODUCTION:
    from django.core.exceptions import ImproperlyConfigured

    if not envstr("SECRET_KEY", ""):
        raise ImproperlyConfigured("SWITCHBOARD_ENV=production needs SECRET_KEY in the environment (50+ random characters)")
    if DEBUG:
        raise ImproperlyConfigured("SWITCHBOARD_ENV=production refuses DEBUG=true (tracebacks would show settings and data)")

# --- cookies and sessions ---------------------------------------------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", _PRODUCTION)
CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", _PRODUCTION)
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the form, but Django's admin may read the cookie
SESSION_COOKIE_AGE = 12 * 3600  # a console sign-in lasts 12 hours

# --- HTTPS ------------------------------------------------------------------------------------
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", _PRODUCTION)
# Health probes come from the orchestrator over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
# Strict-Transport-Security for a year in production (browsers heed it over HTTPS only).
SECURE_HSTS_SECONDS = 31_536_000 if _PRODUCTION else 0
SECURE_HSTS_INCLUDE_SUBDOMAINS = _PRODUCTION
SECURE_HSTS_PRELOAD = _PRODUCTION
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("BEHIND_PROXY", False) else None

# --- response headers -------------------------------------------------------------------------
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Sent by sbcommon.middleware.SecurityHeadersMiddleware; empty: no CSP header. Console scripts are
# files (no inline script); inline style attributes remain, hence 'unsafe-inline' for styles only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'" if _PRODUCTION else ""
)
# Swagger UI ships an inline bootstrap script: these path prefixes get no CSP header.
CONTENT_SECURITY_POLICY_EXEMPT = ["/api/docs/"]
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"

# --- audit log --------------------------------------------------------------------------------
# Audit log of admin and sign-in actions (platform/audit); kept this many days.
AUDIT_RETENTION_DAYS = envint("AUDIT_RETENTION_DAYS", 365)
