"""``bench soak``'s restarts: PostgreSQL or Redis stopped mid-run and started again, and what the requests saw.

A ``Restart`` runs its stop command ``at_s`` seconds into the load, waits ``down_s``, runs its start
command and polls the service until it answers (``back_s``). ``restart_report`` then reads the requests
sent around it: the clean 503s while it was down, anything else that failed, and ``recovery_s``, the
seconds from the service's return until the first answer to a request sent after the last failure.
``ensure_up`` starts a service that is not answering; the soak calls it in a ``finally`` for every
service it may have stopped, since CI and other people use the same servers.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# The defaults of --db-stop/--db-start/--redis-stop/--redis-start: the servers as .ci/run starts them on the CI
# machine (Debian's PostgreSQL 15 cluster; Redis with these options and no config file). Another machine names its own.
DB_STOP = "pg_ctlcluster 15 main stop"
DB_START = "pg_ctlcluster 15 main start"
REDIS_STOP = "redis-cli -p 6379 shutdown nosave"
REDIS_START = ("redis-server --daemonize yes --bind '127.0.0.1 -::1' --port 6379 --save '' --appendonly no --dir /var/lib/redis "
               "--logfile /var/log/redis/ci.log")
COMMAND_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 60.0
READY_POLL_S = 0.1
# The target: the service answers again within this many seconds of the database's (or cache's) return.
RECOVERY_TARGET_S = 10.0
# The clean 503 of a database that is down (sbcommon.middleware); a scheduled fault's 503s carry their own code.
DB_UNAVAILABLE = "503:database_unavailable"


@dataclass
class Restart:
    """One service stopped ``at_s`` seconds into the load for ``down_s`` seconds; the times are filled in as it runs."""

    service: str  # "database" or "cache"
    at_s: float
    down_s: float
    stop: str
    start: str
    ready: Callable[[], bool]
    stopping_s: float | None = None  # when the stop command was run (seconds into the load)
    stopped_s: float | None = None  # when it returned
    back_s: float | None = None  # when the service answered again
    error: str = ""


def run_command(command: str) -> None:
    """Run ``command`` (no shell) and raise with its output if it fails."""
    done = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{command!r} exited with {done.returncode}: {(done.stdout + done.stderr).strip()[-500:]}")


def wait_ready(ready: Callable[[], bool], timeout: float = READY_TIMEOUT_S) -> bool:
    """Poll ``ready`` until it says yes (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return True
        time.sleep(READY_POLL_S)
    return False


def database_ready(database_url: str) -> Callable[[], bool]:
    """A probe: does PostgreSQL at ``database_url`` answer a query?"""
    def ready() -> bool:
        import psycopg

        try:
            with psycopg.connect(database_url, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False
    return ready


def cache_ready(redis_url: str) -> Callable[[], bool]:
    """A probe: does Redis at ``redis_url`` answer PING?"""
    def ready() -> bool:
        import redis

        try:
            return bool(redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2).ping())
        except redis.RedisError:
            return False
    return ready


def ensure_up(restart: Restart) -> str:
    """Start ``restart``'s service if it does not answer; "up", "started" or why it could not be started."""
    if restart.ready():
        return "up"
    try:
        run_command(restart.start)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        return f"down: {exc}"
    return "started" if wait_ready(restart.ready) else f"down: no answer {READY_TIMEOUT_S:.0f} s after {restart.start!r}"


async def drive(restarts: list[Restart], started: float, say: Callable[[str], None]) -> None:
    """Stop and start each service on time (``started``: the load's ``perf_counter`` origin)."""
    for restart in sorted(restarts, key=lambda r: r.at_s):
        await asyncio.sleep(max(0.0, started + restart.at_s - time.perf_counter()))
        restart.stopping_s = time.perf_counter() - started
        try:
            await asyncio.to_thread(run_command, restart.stop)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            restart.error = f"stop failed: {exc}"
            say(f"  t={restart.stopping_s:5.0f} s  {restart.service} could not be stopped: {exc}")
            continue
        restart.stopped_s = time.perf_counter() - started
        say(f"  t={restart.stopped_s:5.0f} s  {restart.service} stopped ({restart.stop!r}) for {restart.down_s:.0f} s")
        await asyncio.sleep(restart.down_s)
        try:
            await asyncio.to_thread(run_command, restart.start)
        except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
            restart.error = f"start failed: {exc}"  # the soak's finally tries again
            say(f"  {restart.service} could not be started: {exc}")
            continue
        if await asyncio.to_thread(wait_ready, restart.ready):
            restart.back_s = time.perf_counter() - started
            say(f"  t={restart.back_s:5.0f} s  {restart.service} answers again")
        else:
            restart.error = f"no answer {READY_TIMEOUT_S:.0f} s after {restart.start!r}"


def restart_reports(restarts: list[Restart], requests: list[tuple[float, float, str]]) -> list[dict[str, Any]]:
    """``restart_report`` for each restart, each one's aftermath ending where the next one's stop begins."""
    ordered = sorted(restarts, key=lambda r: r.at_s)
    ends = [r.stopping_s for r in ordered[1:]] + [None]
    return [restart_report(r, requests, end if end is not None else float("inf")) for r, end in zip(ordered, ends, strict=True)]


def restart_report(restart: Restart, requests: list[tuple[float, float, str]], until_s: float = float("inf")) -> dict[str, Any]:
    """What the requests sent around ``restart`` came to (``requests``: (sent_s, done_s, outcome) into the load;
    ``until_s``: where its aftermath ends, the next restart).

    The outage runs from the stop command to the service's return; ``outcomes_while_down`` counts the
    requests sent in it by outcome ("answered", "503:database_unavailable", a lost kind ...), and
    ``unclean_while_down`` those that are none of an answer, a scheduled fault's 503 or, with the
    database down, its clean 503; ``slowest_while_down_s`` the longest of them (no request hangs). After the return, anything but an answer or a scheduled fault's 503
    is a failure: ``recovery_s`` runs to the first answer to a request sent after the last one.
    """
    report: dict[str, Any] = {"service": restart.service, "stopped_at_s": _round(restart.stopped_s), "down_s": restart.down_s,
                              "back_at_s": _round(restart.back_s), "error": restart.error or None}
    if restart.stopping_s is None or restart.back_s is None:
        report.update(recovery_s=None, outcomes_while_down={}, unclean_while_down={}, failed_after_return=0)
        return report
    down = [(done - sent, o) for sent, done, o in requests if restart.stopping_s <= sent < restart.back_s]
    outcomes = Counter(outcome for _, outcome in down)
    after = sorted((sent, done, o) for sent, done, o in requests if restart.back_s <= sent < until_s)
    failed = [r for r in after if _failed(r[2])]
    last_failure_sent = failed[-1][0] if failed else restart.back_s
    answers = [done for sent, done, o in after if o == "answered" and sent >= last_failure_sent]
    report.update(
        outcomes_while_down=dict(sorted(outcomes.items())),
        answers_503_while_down=outcomes.get(DB_UNAVAILABLE, 0),
        slowest_while_down_s=_round(max((seconds for seconds, _ in down), default=None)),
        unclean_while_down={o: n for o, n in sorted(outcomes.items()) if _failed(o) and not (o == DB_UNAVAILABLE and restart.service == "database")},
        failed_after_return=len(failed),
        recovery_s=_round(min(answers) - restart.back_s) if answers else None,
    )
    return report


def _failed(outcome: str) -> bool:
    """A request that met the restarted service, rather than a scheduled fault (their 503s carry their own code)."""
    return outcome != "answered" and (not outcome.startswith("503:") or outcome == DB_UNAVAILABLE)


def _round(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None
