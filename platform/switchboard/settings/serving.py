"""Serving the chat API: API keys, rate limits, routing events, conversations, encoder batching,
per-process caches, metrics. Each setting is described in docs/CONFIGURATION.md."""

from __future__ import annotations

from sbcommon.env import envbool, envint, envstr

from .queues import CELERY_TASK_ALWAYS_EAGER

# --- the chat API -----------------------------------------------------------------------------
# Closed by default in production (SWITCHBOARD_ENV=production): an API key or a signed-in user is needed.
CHAT_API_REQUIRE_AUTH = envbool("CHAT_API_REQUIRE_AUTH", envstr("SWITCHBOARD_ENV", "development") == "production")
MAX_QUESTION_CHARS = 8000  # longer questions are refused

# --- API keys and rate limits (requests per minute, 0 = unlimited) -----------------------------
API_KEY_DEFAULT_RATE_PER_MINUTE = envint("API_KEY_DEFAULT_RATE_PER_MINUTE", 600)  # new keys'; each can be changed in the console
CHAT_API_ANON_RATE_PER_MINUTE = envint("CHAT_API_ANON_RATE_PER_MINUTE", 0)  # per client address without an API key
KEY_LAST_USED_RESOLUTION_S = 60  # a key's last_used_at is written at most this often: authenticating costs no write

# --- routing events ---------------------------------------------------------------------------
STORE_QUESTION_TEXT = envbool("STORE_QUESTION_TEXT", True)  # events keep the question's text (for the review queue)
ROUTING_EVENT_RETENTION_DAYS = envint("ROUTING_EVENT_RETENTION_DAYS", 90)
ROUTING_EVENT_RETENTION_BATCH = 5000  # rows the retention task deletes at a time
# Events are buffered and written in batches by a background thread (serving.events); EVENTS_SYNC writes each
# in its request instead (on when Celery runs eagerly, as in tests).
EVENTS_SYNC = CELERY_TASK_ALWAYS_EAGER
EVENTS_FLUSH_MS = 500
EVENTS_BATCH_SIZE = 200
EVENTS_BUFFER_MAX = 20000

# --- the answer cache (serving.answer_cache): the language model's answers kept per web process (0: off)
ANSWER_CACHE_SIZE = envint("ANSWER_CACHE_SIZE", 0)

# --- conversations: forgotten this many hours after their last turn ------------------------------
CONVERSATION_TTL_HOURS = 24.0

# --- the encoder in a serving process ---------------------------------------------------------
# torch threads of the micro-batched forward passes (0: TORCH_THREADS, -1: every CPU; extra threads pay only on
# cores the server has to itself).
ENCODER_THREADS = envint("ENCODER_THREADS", 0)
# Encode in a child process (in-process, a pass waits for the GIL behind the request threads); switchboard.asgi
# turns this on for servers, tests and workers leave it off.
ENCODER_PROCESS = envbool("ENCODER_PROCESS", False)

# --- request threads and per-process caches ---------------------------------------------------
REQUEST_THREADS_KEEP = 64  # idle request threads (each with its database connection) a server process keeps
# Seconds a serving process reuses what it read of the active router, experts and versions (its own saves show at
# once), and trusts the embedded store's active-snapshot pointer; 0 when Celery runs eagerly (tests).
SERVING_CACHE_TTL_S = 0.0 if CELERY_TASK_ALWAYS_EAGER else 2.0
QDRANT_POINTER_TTL_S = 0.0 if CELERY_TASK_ALWAYS_EAGER else 1.0

# --- metrics: /metrics (Prometheus); with METRICS_TOKEN scrapers send it as a Bearer token, else loopback only
METRICS_ENABLED = envbool("METRICS_ENABLED", True)
METRICS_TOKEN = envstr("METRICS_TOKEN", "")
