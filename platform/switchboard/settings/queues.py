"""Celery (broker, queues, beat schedule) and the job runner's leases and sweeps.

Not named ``celery``: this package's modules import the real Celery library by that name.
"""

from __future__ import annotations

from sbcommon.env import envbool, envstr

from .core import TIME_ZONE, VAR_DIR

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
# Publishing a task message gives up fast when the broker is down (the sweeper sends it later).
CELERY_BROKER_CONNECTION_TIMEOUT = 2.0
CELERY_RESULT_BACKEND = None  # jobs record their own status in the database
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_DEFAULT_QUEUE = "cpu"
CELERY_TASK_ROUTES = {"*.train_*": {"queue": envstr("TRAINING_QUEUE", "cpu")}}
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_TIMEZONE = TIME_ZONE

# --- jobs -------------------------------------------------------------------------------------
# Jobs survive a broker outage and killed workers (jobs.services.sweep, run by beat every JOB_SWEEP_S): a
# running job whose worker sent no heartbeat (every JOB_HEARTBEAT_S) for JOB_LEASE_S is queued again, at
# most JOB_MAX_ATTEMPTS runs in all; a message the broker never got is sent again after JOB_DISPATCH_GRACE_S,
# one delivered but never claimed after JOB_REDELIVER_AFTER_S.
JOB_LEASE_S = 300
JOB_HEARTBEAT_S = 30
JOB_MAX_ATTEMPTS = 3
JOB_DISPATCH_GRACE_S = 30
JOB_REDELIVER_AFTER_S = 900
JOB_SWEEP_S = 60
# The sweeper's queue. Behind long jobs on a busy `cpu` queue it waits its turn (a worker also sweeps once as it starts).
JOB_SWEEP_QUEUE = "cpu"

# --- beat schedule ----------------------------------------------------------------------------
CELERY_BEAT_SCHEDULE = {
    "jobs-sweep": {"task": "jobs.sweep_jobs", "schedule": float(JOB_SWEEP_S), "options": {"queue": JOB_SWEEP_QUEUE}},
    "audit-prune": {"task": "audit.prune_audit_log", "schedule": 24 * 3600.0, "options": {"queue": "cpu"}},
}
