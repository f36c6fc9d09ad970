"""Serving the chat API: API keys, rate limits, routing events, conversations, encoder batching,
per-process caches, metrics."""

from __future__ import annotations

from sbcommon.env import envbool, envint, envstr

from .queues import CELERY_TASK_ALWAYS_EAGER

# --- the chat API -----------------------------------------------------------------------------
# Closed by default in production (SWITCHBOARD_ENV=production): the chat, models and route APIs need an
# API key or a signed-in user unless the operator opens them with CHAT_API_REQUIRE_AUTH=false.
CHAT_API_REQUIRE_AUTH = envbool("CHAT_API_REQUIRE_AUTH", envstr("SWITCHBOARD_ENV", "development") == "production")
MAX_QUESTION_CHARS = 8000  # longer questions are refused

# --- API keys and rate limits -----------------------------------------------------------------
# New API keys' requests per minute (0 = unlimited); each key can be changed in the console.
API_KEY_DEFAULT_RATE_PER_MINUTE = envint("API_KEY_DEFAULT_RATE_PER_MINUTE", 600)
# Requests per minute per client address without an API key (0 = unlimited, the single-machine default).
CHAT_API_ANON_RATE_PER_MINUTE = envint("CHAT_API_ANON_RATE_PER_MINUTE", 0)
# A key's last_used_at is written at most this often (seconds), so authenticating costs no write.
KEY_LAST_USED_RESOLUTION_S = 60

# --- routing events ---------------------------------------------------------------------------
# Routing events keep the question text (for the review queue) unless this is off; events and their
# text are deleted after ROUTING_EVENT_RETENTION_DAYS.
STORE_QUESTION_TEXT = envbool("STORE_QUESTION_TEXT", True)
ROUTING_EVENT_RETENTION_DAYS = envint("ROUTING_EVENT_RETENTION_DAYS", 90)
# The retention task deletes events older than ROUTING_EVENT_RETENTION_DAYS this many rows at a time.
ROUTING_EVENT_RETENTION_BATCH = 5000
# Routing events are buffered and written in batches by a background thread every EVENTS_FLUSH_MS or
# EVENTS_BATCH_SIZE events; at most EVENTS_BUFFER_MAX wait (beyond, new ones are dropped and counted).
# EVENTS_SYNC writes each event in the request instead (default: on when Celery runs eagerly, as in tests).
EVENTS_SYNC = CELERY_TASK_ALWAYS_EAGER
EVENTS_FLUSH_MS = 500
EVENTS_BATCH_SIZE = 200
EVENTS_BUFFER_MAX = 20000

# --- the answer cache (serving.answer_cache) ---------------------------------------------------
# Answers the language model wrote, kept per web process (this many; 0: off) and served again to the
# same question (case and spacing aside) with the same expert version, prompt and passages.
ANSWER_CACHE_SIZE = envint("ANSWER_CACHE_SIZE", 0)

# --- conversations ----------------------------------------------------------------------------
# Conversations (their expert, their turns' embeddings) are forgotten this many hours after their last
# turn. How a follow-up is routed and searched with its conversation: routing.ml.conversation and
# knowledge.ml.conversation.
CONVERSATION_TTL_HOURS = 24.0

# --- the encoder in a serving process ---------------------------------------------------------
# torch threads of the encoder's micro-batched forward passes in a serving process (0: TORCH_THREADS,
# -1: every CPU). The web process's only torch user is the encoder (the router scores with numpy) and
# its passes are serialised, so on cores the server has to itself a batch may use them all; where the
# server shares its cores (with its clients, a worker, other work) extra threads oversubscribe them.
ENCODER_THREADS = envint("ENCODER_THREADS", 0)
# Run the encoder's forward passes in a child process of the serving process (in-process, a pass waits
# for the GIL behind the request threads); switchboard.asgi turns this on for servers, tests and workers
# leave it off. How passes are batched: encoders.
ENCODER_PROCESS = envbool("ENCODER_PROCESS", False)

# --- request threads and per-process caches ---------------------------------------------------
# Idle request threads (each with its database connection) a server process keeps for the next requests.
REQUEST_THREADS_KEEP = 64
# Seconds a serving process reuses what it read of the active router, experts and expert versions
# (saving them through the ORM clears this process's copy at once; other processes, and changes made
# with queryset.update(), show within this time). 0 (off) when Celery runs eagerly (tests).
SERVING_CACHE_TTL_S = 0.0 if CELERY_TASK_ALWAYS_EAGER else 2.0
# Seconds a process trusts the embedded store's active-snapshot pointer it read (searches only;
# writes in the process update it at once, another process's re-index shows within this time).
QDRANT_POINTER_TTL_S = 0.0 if CELERY_TASK_ALWAYS_EAGER else 1.0

# --- metrics ----------------------------------------------------------------------------------
# /metrics (Prometheus): off with METRICS_ENABLED=false; with METRICS_TOKEN set, scrapers must send
# `Authorization: Bearer <token>`; without a token only this machine (loopback) may read it.
METRICS_ENABLED = envbool("METRICS_ENABLED", True)
METRICS_TOKEN = envstr("METRICS_TOKEN", "")
