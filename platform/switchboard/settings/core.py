"""Core: paths, the secret key, hosts, installed apps, middleware, templates, sign-in, static files."""

from __future__ import annotations

from pathlib import Path

from sbcommon.env import envbool, envlist, envstr

# --- paths ------------------------------------------------------------------------------------
BASE_DIR = Path(__file__).resolve().parents[3]
VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)
DEMO_DIR = BASE_DIR / "demo"  # the bundled demo load_demo reads

# --- debug and the secret key -----------------------------------------------------------------
DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", "")
if not SECRET_KEY:
    # SWITCHBOARD_ENV=production refuses to start without one (security.py). Otherwise: a per-installation key kept under var/, so a laptop install is not shipped with a known key.
    _key_file = VAR_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

# --- hosts ------------------------------------------------------------------------------------
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

# --- apps and middleware ----------------------------------------------------------------------
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",
    "django_celery_beat",
    "switchboard",  # the project itself: whole-platform commands (run_platform, ensure_admin, load_demo)
    "jobs",
    "experts",
    "knowledge",
    "labeling",
    "routing",
    "routing.experiments",  # A/B tests; its tables also hold the schedules' and the alarms' rows (their models say app_label "experiments")
    "routing.schedules",
    "routing.alarms",
    "serving",
    "console",
    "evaluation",
    "clients",  # API keys of the chat API
    "audit",  # audit log of admin and sign-in actions (AUDIT_RETENTION_DAYS in security.py)
    "operations",  # manage.py backup / restore and the daily scheduled backup (BACKUP_* in database.py)
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy and Permissions-Policy (security.py), which Django does not send itself.
    "sbcommon.middleware.SecurityHeadersMiddleware",
    # The strings of a JSON request body are masked in every log line of that request (logs.py).
    "sbcommon.middleware.PersonalDataMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    # A database that is locked or briefly gone: safe requests are retried, then 503 with Retry-After
    # (DB_UNAVAILABLE_* in database.py).
    "sbcommon.middleware.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "switchboard.urls"
WSGI_APPLICATION = "switchboard.wsgi.application"
ASGI_APPLICATION = "switchboard.asgi.application"

# --- templates --------------------------------------------------------------------------------
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.nav.nav",
                "console.context_processors.expert_names",
            ],
        },
    },
]

# --- sign-in ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console-overview"
LOGOUT_REDIRECT_URL = "login"

# --- language and time ------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

# --- static and media files -------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "templates" / "static"]
MEDIA_ROOT = VAR_DIR / "media"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)
