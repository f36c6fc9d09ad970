"""The database, the cache, and what a request does while the database is briefly unavailable."""

from __future__ import annotations

import dj_database_url

from sbcommon.env import envstr

from .core import VAR_DIR

# --- database ---------------------------------------------------------------------------------
DATABASES = {
    "default": dj_database_url.parse(
        envstr("DATABASE_URL", f"sqlite:///{VAR_DIR / 'switchboard.sqlite3'}"),
        # Request threads are kept between requests (switchboard.asgi.RequestThreads), so is each one's connection.
        conn_max_age=60,
        conn_health_checks=True,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web server, worker and beat share one file: WAL lets readers run beside a writer, and
    # IMMEDIATE transactions make writers queue on the busy timeout instead of failing mid-way.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,  # seconds a writer waits for the lock before failing
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- backups ----------------------------------------------------------------------------------
# The daily scheduled backup (operations.services) writes a folder per backup into BACKUP_DIR and keeps the last
# BACKUP_KEEP; link $VAR_DIR/backups to another disk to keep them off the data's own. Fixed settings: the
# operator's environment variables are capped at 60 (tests/platform/test_env_example.py).
BACKUP_DIR = VAR_DIR / "backups"
BACKUP_KEEP = 7

# --- database unavailable ---------------------------------------------------------------------
# A database that is locked or briefly gone (sbcommon.middleware.DatabaseUnavailableMiddleware): safe
# requests are retried this many times, the delay doubling from the first, then 503 with this Retry-After.
DB_UNAVAILABLE_RETRIES = 3
DB_UNAVAILABLE_BACKOFF_S = 0.2
DB_UNAVAILABLE_RETRY_AFTER_S = 5

# --- cache ------------------------------------------------------------------------------------
# Rate-limit counters and circuit-breaker state live in the cache: per process (LocMem) on one
# machine; REDIS_URL shares them between web processes and machines (django's RedisCache).
REDIS_URL = envstr("REDIS_URL", "")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "switchboard"}}
