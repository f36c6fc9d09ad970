"""Creating, claiming and finishing jobs.

A job is enqueued at most once per key while active (``enqueue_once``) and claimed by one conditional
UPDATE. The Job row is the truth and the broker message a nudge: ``sweep`` (every minute) sends again
what the broker missed, and queues again a job whose heartbeat stopped for ``JOB_LEASE_S`` (at once
when its dead process ran on this machine), up to ``JOB_MAX_ATTEMPTS`` runs.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.management.base import OutputWrapper
from django.db import connection, transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce
from django.utils import timezone

from .choices import ACTIVE_STATUSES, JobStatus
from .models import Job

logger = logging.getLogger(__name__)


class JobFailed(Exception):
    """A known failure: the job ends as failed with this message, without a traceback."""


class JobCancelled(JobFailed):
    """Raised from a reporter's ``progress`` once the job's row says cancelled: the work stops there."""


def enqueue_once(kind: str, key: str, title: str, task: Any, params: dict[str, Any] | None = None, user: Any = None) -> Job:
    """Create a job and send its Celery task, unless an active job with the same key exists.

    Args:
        kind: the job family ("import_queries", "train_router", ...).
        key: idempotency key; while a job with this key is queued or running, it is returned instead.
        title: what the console shows.
        task: the Celery task, sent as ``task.apply_async((job_id,))`` after commit (see ``dispatch``); a
            signature carries execution options (``train.s().set(queue="gpu")``). Its ``name`` is recorded
            as the row's ``task_name`` and its queue, if it names one, as ``queue``: the sweeper and
            retries send the task there again (its other options are not kept).
        params: JSON parameters the task reads from the row.
        user: who asked for it, if anyone.
    """
    with transaction.atomic():
        existing = Job.objects.select_for_update().filter(key=key, status__in=ACTIVE_STATUSES).first()
        if existing is not None:
            return existing
        job = Job.objects.create(kind=kind, key=key, title=title, params=params or {}, created_by=user, task_name=getattr(task, "name", "") or "",
                                 queue=_queue_of(task))
    # Sent after commit so the worker always finds the row.
    transaction.on_commit(lambda: dispatch(job.pk, task))
    return job


def _queue_of(task: Any) -> str:
    """The queue a Celery signature is set to send to (``train.s().set(queue="gpu")``); "" for a task or a signature without one."""
    options = task.get("options") if isinstance(task, dict) else None  # a Signature is a dict
    return str((options or {}).get("queue") or "")


def _broker_errors() -> tuple[type[BaseException], ...]:
    from kombu.exceptions import OperationalError as KombuOperationalError

    return (KombuOperationalError, ConnectionError, OSError, TimeoutError)


def dispatch(job_id: int, task: Any = None) -> bool:
    """Send the job's task message; ``False`` (and the row stays queued for ``sweep``) when the broker is unreachable.

    A request that enqueues a job never fails because the broker is down: the Job row is already
    committed, and the message is only the signal for a worker to look at it.
    """
    from celery import current_app

    job = Job.objects.filter(pk=job_id).only("task_name", "queue").first()
    if job is None:
        return False
    app = getattr(task, "app", None) or current_app
    if app.conf.task_always_eager:
        # In-process mode (tests, `make demo`): the task runs here and its own errors must propagate.
        Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now())
        if task is not None:
            task.apply_async((job_id,))
        elif job.task_name:
            app.tasks[job.task_name].apply_async((job_id,))
        return True
    try:
        if task is not None:
            task.apply_async((job_id,), retry=False)
        elif job.task_name:
            app.send_task(job.task_name, args=(job_id,), retry=False, **({"queue": job.queue} if job.queue else {}))
        else:
            logger.warning("jobs.dispatch_without_task", extra={"job": job_id})
            return False
    except _broker_errors() as exc:
        logger.warning("jobs.broker_unavailable", extra={"job": job_id, "error": exc.__class__.__name__})
        return False
    Job.objects.filter(pk=job_id).update(dispatched_at=timezone.now())
    return True


def _with_last_seen():
    return Job.objects.annotate(last_seen=Coalesce("heartbeat_at", "started_at", "created_at"))


def _stale_running(now: Any) -> Q:
    """Running jobs whose worker has shown no sign of life for a lease: it was killed or lost."""
    lease = timedelta(seconds=settings.JOB_LEASE_S)
    return Q(status=JobStatus.RUNNING, last_seen__lt=now - lease)


def _process_gone(claimed_by: str, *, starting: bool) -> bool:
    """Whether ``claimed_by`` (``host:pid``) names a process of this machine that no longer runs.

    Only this machine's processes can be checked; any other is left to the lease. ``starting``: the
    caller is a worker that has not claimed anything yet, so a row naming its own pid is from an
    earlier process that had the same pid (a restarted container numbers its processes alike).
    A pid reused by an unrelated process reads as alive: the lease still catches that job.
    """
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return starting
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError):  # another user's process (alive), or no such pid at all
        return False
    return False


def _requeue_or_fail(job: Job, still_lost: Any, why: str, max_attempts: int, now: Any, counts: dict[str, int]) -> None:
    """Queue a job whose worker is gone again, or fail it once it is out of attempts.

    ``still_lost``: the job's row filtered on the condition that found it lost, so that a worker that
    claimed or finished it meanwhile wins (a conditional UPDATE changes nothing then).
    """
    if job.attempts >= max_attempts:
        error = f"the worker running this job stopped responding {job.attempts} times; giving up (JOB_MAX_ATTEMPTS={max_attempts})"
        counts["failed"] += still_lost.update(status=JobStatus.FAILED, finished_at=now, error=error, message=error[:255])
    elif still_lost.update(status=JobStatus.QUEUED, dispatched_at=None, message="queued again: its worker was lost"):
        counts["requeued"] += 1
        _append_log(job.pk, f"worker lost ({why}); queued again")


def sweep(now: Any = None, *, starting: bool = False) -> dict[str, int]:
    """Send again what the broker never got, requeue jobs whose worker died, fail those out of attempts.

    Idempotent and safe to run from several places at once: every change is a conditional UPDATE,
    and a duplicate message is harmless because a worker claims a job with one (see ``claim``).

    Args:
        now: the time to judge leases by (default: now).
        starting: called by a worker as it starts (``switchboard.celery``), before it claims anything.

    Returns:
        counts: ``resent`` (queued, message never delivered or lost), ``requeued`` (worker gone),
        ``failed`` (worker gone and no attempts left).
    """
    now = now or timezone.now()
    counts = {"resent": 0, "requeued": 0, "failed": 0}
    max_attempts = settings.JOB_MAX_ATTEMPTS
    lease_s = settings.JOB_LEASE_S
    # A process of this machine that is gone: no need to wait out its lease.
    running = Job.objects.filter(status=JobStatus.RUNNING).exclude(claimed_by="")
    for job in running.only("id", "attempts", "claimed_by"):
        if _process_gone(job.claimed_by, starting=starting):
            still_lost = Job.objects.filter(pk=job.pk, status=JobStatus.RUNNING, claimed_by=job.claimed_by)
            _requeue_or_fail(job, still_lost, f"its process {job.claimed_by} is gone", max_attempts, now, counts)
    for job in _with_last_seen().filter(_stale_running(now)).only("id", "attempts"):
        still_lost = _with_last_seen().filter(_stale_running(now), pk=job.pk)
        _requeue_or_fail(job, still_lost, f"no heartbeat for {lease_s:.0f} s", max_attempts, now, counts)
    grace = timedelta(seconds=settings.JOB_DISPATCH_GRACE_S)
    redeliver = timedelta(seconds=settings.JOB_REDELIVER_AFTER_S)
    pending = Job.objects.filter(status=JobStatus.QUEUED).exclude(task_name="").filter(
        Q(dispatched_at__isnull=True, created_at__lt=now - grace)  # never reached the broker
        | Q(dispatched_at__isnull=True, attempts__gt=0)  # requeued after its worker died
        | Q(dispatched_at__lt=now - redeliver)  # delivered, but nobody claimed it for long: the message was lost
    )
    for job_id in list(pending.values_list("id", flat=True)):
        if dispatch(job_id):
            counts["resent"] += 1
    if any(counts.values()):
        logger.info("jobs.sweep", extra=counts)
    return counts


def claim(job_id: int) -> Job | None:
    """Mark a queued job running; ``None`` if it was already claimed, finished or deleted.

    A job left ``running`` by a killed worker is claimed again once its heartbeat is older than
    the lease (acks_late redelivers the task, or ``sweep`` queues it again); while its worker is
    alive a duplicate message finds nothing to claim. A job past ``JOB_MAX_ATTEMPTS`` runs is
    failed instead of run again.
    """
    now = timezone.now()
    updated = _with_last_seen().filter(Q(pk=job_id) & (Q(status=JobStatus.QUEUED) | _stale_running(now))).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, attempts=F("attempts") + 1, claimed_by=f"{socket.gethostname()}:{os.getpid()}"
    )
    if not updated:
        return None
    job = Job.objects.get(pk=job_id)
    max_attempts = settings.JOB_MAX_ATTEMPTS
    if job.attempts > max_attempts:
        _finish(job.pk, JobStatus.FAILED, error=f"gave up after {max_attempts} attempts (JOB_MAX_ATTEMPTS)")
        return None
    return job


class _Heartbeat(threading.Thread):
    """Touches the running job's ``heartbeat_at`` every ``JOB_HEARTBEAT_S`` from a daemon thread, until stopped.

    A worker killed by SIGKILL or the OOM killer stops beating, which is how ``sweep`` tells a
    lost job from a long one.
    """

    def __init__(self, job_id: int, interval: float):
        super().__init__(name=f"job-{job_id}-heartbeat", daemon=True)
        self.job_id, self.interval = job_id, interval
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            while not self.stopped.wait(self.interval):
                try:
                    Job.objects.filter(pk=self.job_id, status=JobStatus.RUNNING).update(heartbeat_at=timezone.now())
                except Exception:  # a busy database: the next beat tries again; the lease is many beats long
                    logger.warning("jobs.heartbeat_failed", extra={"job": self.job_id}, exc_info=True)
        finally:
            connection.close()

    def stop(self) -> None:
        self.stopped.set()


def _start_heartbeat(job_id: int) -> _Heartbeat | None:
    if settings.CELERY_TASK_ALWAYS_EAGER:
        return None  # in-process runs: the caller is the worker, and tests share one database connection
    beat = _Heartbeat(job_id, settings.JOB_HEARTBEAT_S)
    beat.start()
    return beat


@dataclass
class JobReporter:
    """Handed to services so they report progress without knowing about Job rows."""

    job_id: int | None = None

    def progress(self, fraction: float, message: str = "") -> None:
        if self.job_id is None:
            return
        updated = Job.objects.filter(pk=self.job_id).exclude(status=JobStatus.CANCELLED).update(
            progress=max(0.0, min(1.0, fraction)), message=message[:255], heartbeat_at=timezone.now())
        if not updated and Job.objects.filter(pk=self.job_id, status=JobStatus.CANCELLED).exists():
            raise JobCancelled(f"job {self.job_id} was cancelled")

    def log(self, line: str) -> None:
        logger.info("job %s: %s", self.job_id, line)
        if self.job_id is not None:
            _append_log(self.job_id, line)


def _append_log(job_id: int, line: str) -> None:
    stamp = timezone.now().strftime("%H:%M:%S")
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None:
            return
        job.log = (job.log + f"[{stamp}] {line}\n")[-20000:]
        job.save(update_fields=["log"])


def run_job(job_id: int, work: Callable[[Job, JobReporter], dict[str, Any] | None]) -> Job | None:
    """Claim the job, run ``work(job, reporter)``, and record the outcome.

    Known failures (``JobFailed``) end the job as failed; unknown errors are recorded and re-raised
    so Celery's retry policy and the logs see them.
    """
    job = claim(job_id)
    if job is None:
        logger.info("job %s not claimable (finished or taken); nothing to do", job_id)
        return None
    reporter = JobReporter(job.pk)
    heartbeat = _start_heartbeat(job.pk)
    try:
        result = work(job, reporter) or {}
    except JobFailed as exc:
        _finish(job.pk, JobStatus.FAILED, error=str(exc))
        return Job.objects.get(pk=job.pk)
    except Exception as exc:
        _finish(job.pk, JobStatus.FAILED, error=f"{exc.__class__.__name__}: {exc}\n\n{traceback.format_exc()}")
        raise
    finally:
        if heartbeat is not None:
            heartbeat.stop()
    _finish(job.pk, JobStatus.SUCCEEDED, result=result)
    return Job.objects.get(pk=job.pk)


def _finish(job_id: int, status: str, *, result: dict[str, Any] | None = None, error: str = "") -> None:
    fields: dict[str, Any] = {"status": status, "finished_at": timezone.now(), "error": error}
    if status == JobStatus.SUCCEEDED:
        fields.update(progress=1.0, result=result or {}, message="done")
    else:
        fields["message"] = error.splitlines()[0][:255] if error else status
    # A job cancelled while it ran keeps its cancelled status (only a running row is finished).
    Job.objects.filter(pk=job_id, status=JobStatus.RUNNING).update(**fields)


@dataclass
class ConsoleReporter(JobReporter):
    """For management commands: progress on one rewritten line on a terminal, every tenth elsewhere (logs stay short)."""

    out: OutputWrapper | None = None
    tty: bool = False
    last_tenth: int = -1

    def progress(self, fraction: float, message: str = "") -> None:
        if self.out is None:
            return
        if self.tty:
            self.out.write(f"\r  {fraction:6.1%}  {message}\033[K", ending="")
            self.out.flush()
        elif int(fraction * 10) > self.last_tenth:
            self.last_tenth = int(fraction * 10)
            self.out.write(f"  {fraction:6.1%}  {message}")

    def log(self, line: str) -> None:
        if self.out is not None:
            self.out.write(("\n" if self.tty else "") + f"  {line}")


# --- console actions: retry and cancel ------------------------------------------------------------

RETRYABLE_STATUSES = (JobStatus.FAILED, JobStatus.CANCELLED)


def retry_job(job: Job, task: Any, user: Any = None) -> Job:
    """A new attempt of a failed or cancelled job: same kind, key and parameters (``enqueue_once``, so a
    double submit, or a retry while another attempt is active, gives the one active job)."""
    if job.status not in RETRYABLE_STATUSES:
        raise ValueError(f"only a failed or cancelled job can be retried; this one is {job.status}")
    if job.queue and not _queue_of(task):  # to the queue the first attempt was sent to (a GPU worker's, say)
        task = task.s().set(queue=job.queue)
    return enqueue_once(job.kind, job.key, job.title, task, job.params, user)


def cancel_job(job: Job, user: Any = None) -> bool:
    """Mark a queued or running job cancelled; ``False`` when it had already finished.

    A queued job is then never claimed; a running one stops at its next progress report
    (``JobCancelled``), and its outcome never overwrites the cancellation.
    """
    who = getattr(user, "username", "") or "a user"
    return bool(Job.objects.filter(pk=job.pk, status__in=ACTIVE_STATUSES).update(
        status=JobStatus.CANCELLED, finished_at=timezone.now(), message=f"cancelled by {who}"[:255],
    ))
