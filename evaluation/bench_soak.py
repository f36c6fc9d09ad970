"""``manage.py bench soak``: a bounded load on loopback with faults injected on a schedule.

The demo is served by uvicorn (``bench serving``'s pieces) with ``SWITCHBOARD_FAULTS_FILE`` in its
folder; after a warm-up, ``rps`` requests a second are sent open-loop for ``duration`` seconds while
the schedule rewrites the faults file (``sbcommon.faults``: a generator or the store fails or stalls).
Resident memory is read before and after, and every answered request must have exactly one routing
event. Each request ends as an answer (``fallbacks``: given by another expert after a failure), a clean
JSON error (``errors`` by kind), or ``lost`` (timeout, dropped, not the API's body), which must stay 0.
With ``restarts`` the PostgreSQL and Redis it runs on are stopped and started again mid-run as well
(``evaluation.soak_restarts``): clean 503s while the database is down, answers again within 10 s of its return.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbcommon import faults

from . import soak_restarts
from .bench_serving import Server, _free_port, _percentile, deployment_env, held_out_questions, prepare_demo, process_tree, unique_question
from .measure import status_kb
from .soak_restarts import RECOVERY_TARGET_S, Restart

REQUEST_TIMEOUT_S = 60.0
# Connections open at once. Requests due while all are busy wait on the client (their wait counts in
# their latency) rather than pile up inside an overloaded server until every one of them times out.
MAX_IN_FLIGHT = 8
# When the restarts come, as fractions of the run: between the fault schedule's first phases and its last
# (every generator failing at 0.85), so that a restart's recovery is not hidden behind a scheduled fault's 503s.
RESTART_AT = {"database": 0.25, "cache": 0.65}


@dataclass
class Phase:
    """One fault switched on at ``start`` (seconds into the load) for ``seconds``."""

    start: float
    seconds: float
    name: str
    spec: dict[str, Any]
    label: str


@dataclass
class Tally:
    """What the requests came to."""

    latencies_ms: list[float] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    lost: Counter[str] = field(default_factory=Counter)
    fallbacks: int = 0
    answered_by: Counter[str] = field(default_factory=Counter)
    timeline: list[tuple[float, float, str]] = field(default_factory=list)  # (sent_s, done_s, outcome) into the load


def schedule(duration: float, experts: list[str]) -> list[Phase]:
    """The fault schedule, scaled to the run: one expert's generator down for 20 s, the store slow, one
    expert's collection unreachable, and a short spell with every generator down (clean 503s expected)."""
    first = experts[0] if experts else "none"
    second = experts[1] if len(experts) > 1 else first
    return [
        Phase(0.15 * duration, 20.0, "generator", {"mode": "error", "experts": [first]}, f"generator errors for {first}"),
        Phase(0.40 * duration, 15.0, "vector_store", {"mode": "slow", "delay_s": 0.3}, "vector store paused 0.3 s per search"),
        Phase(0.60 * duration, 15.0, "vector_store", {"mode": "down", "experts": [second]}, f"vector store unreachable for {second}"),
        Phase(0.85 * duration, 5.0, "generator", {"mode": "error"}, "every generator failing"),
    ]


def rss_mb(root: int) -> float:
    """Resident memory of the process tree under ``root``, in MiB (VmRSS from /proc)."""
    return round(sum(status_kb("VmRSS", pid) or 0 for pid in process_tree(root)) / 1024, 1)


def _experts(base: str) -> list[str]:
    """The experts the server offers (``/v1/models`` less the ``auto`` modes)."""
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
        models = [m["id"] for m in json.load(response).get("data", [])]
    return [m for m in models if not m.startswith("auto")]


def _classify(tally: Tally, status: int, body: bytes, elapsed_ms: float) -> str:
    """Count one response in ``tally``; returns its outcome: "answered", the error's kind or the lost kind."""
    try:
        payload = json.loads(body)
    except ValueError:
        return _lost(tally, f"http_{status}_not_json")
    if status == 200 and isinstance(payload, dict) and payload.get("choices"):
        content = (payload["choices"][0].get("message") or {}).get("content")
        if not isinstance(content, str) or not content:
            return _lost(tally, "empty_answer")
        meta = payload.get("switchboard") or {}
        tally.latencies_ms.append(elapsed_ms)
        tally.answered.append(str(payload.get("id", "")))
        tally.answered_by[str(meta.get("expert") or "none")] += 1
        if meta.get("failover_from"):
            tally.fallbacks += 1
        return "answered"
    error = payload.get("error") if isinstance(payload, dict) else None
    if status >= 400 and isinstance(error, dict) and error.get("message"):
        tally.latencies_ms.append(elapsed_ms)
        kind = f"{status}:{error.get('code') or error.get('type') or 'error'}"
        tally.errors[kind] += 1
        return kind
    return _lost(tally, f"http_{status}_unexpected_body")


def _lost(tally: Tally, kind: str) -> str:
    tally.lost[kind] += 1
    return kind


async def _load(base: str, questions: list[str], rps: float, duration: float, phases: list[Phase], faults_file: Path,
                say: Callable[[str], None], run: str, restarts: list[Restart] | None = None) -> tuple[Tally, float]:
    """Send ``rps`` requests a second for ``duration`` seconds, switching faults per ``phases`` and stopping and
    starting services per ``restarts``; returns the tally and wall time."""
    import httpx

    tally = Tally()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def one(http: httpx.AsyncClient, n: int, started: float) -> None:
        body = {"model": "auto", "messages": [{"role": "user", "content": unique_question(questions, n, run)}]}
        t0 = time.perf_counter()  # open loop: a request's latency includes any wait for a free connection
        async with gate:
            try:
                response = await http.post("/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S)
            except httpx.HTTPError as exc:
                outcome = _lost(tally, type(exc).__name__)
            else:
                outcome = _classify(tally, response.status_code, response.content, (time.perf_counter() - t0) * 1000)
        tally.timeline.append((t0 - started, time.perf_counter() - started, outcome))

    async def fault_driver(started: float) -> None:
        active: dict[str, dict[str, Any]] = {}
        for phase in phases:
            await asyncio.sleep(max(0.0, started + phase.start - time.perf_counter()))
            active[phase.name] = {**phase.spec, "until": time.time() + phase.seconds}
            faults.write(faults_file, active)
            say(f"  t={phase.start:5.0f} s  fault on: {phase.label} ({phase.seconds:.0f} s)")

    limits = httpx.Limits(max_connections=MAX_IN_FLIGHT, max_keepalive_connections=16)
    async with httpx.AsyncClient(base_url=base, limits=limits) as http:
        started = time.perf_counter()
        driver = asyncio.create_task(fault_driver(started))
        restarter = asyncio.create_task(soak_restarts.drive(restarts or [], started, say))
        tasks = []
        total = int(duration * rps)
        for n in range(total):
            await asyncio.sleep(max(0.0, started + n / rps - time.perf_counter()))
            tasks.append(asyncio.create_task(one(http, n, started)))
        await asyncio.gather(*tasks)
        driver.cancel()
        await restarter  # a service still down would be started again by the soak's finally; let the drive finish first
        wall = time.perf_counter() - started
    return tally, wall


def _event_counts(db_path: Path, request_ids: list[str], database_url: str | None = None) -> tuple[list[str], list[str]]:
    """(answered requests with no routing event, answered requests with more than one), read from SQLite or ``database_url``."""
    query = "SELECT request_id, COUNT(*) FROM routing_routingevent GROUP BY request_id"
    if database_url:
        import psycopg

        with psycopg.connect(database_url) as conn:
            counts = dict(conn.execute(query).fetchall())
    elif not request_ids or not db_path.exists():
        return list(request_ids), []
    else:
        with sqlite3.connect(db_path, timeout=30) as conn:
            counts = dict(conn.execute(query).fetchall())
    missing = [rid for rid in request_ids if counts.get(rid, 0) == 0]
    duplicated = [rid for rid in request_ids if counts.get(rid, 0) > 1]
    return missing, duplicated


def plan_restarts(services: list[str], duration: float, down_s: float, database_url: str | None, redis_url: str | None,
                  commands: dict[str, str]) -> list[Restart]:
    """The restarts asked for (``services``: "database", "cache"), at ``RESTART_AT`` of the run.

    ``commands``: ``db_stop``, ``db_start``, ``redis_stop``, ``redis_start`` (missing: this machine's defaults).
    Raises ``ValueError`` for a service the soak does not run on, or a run too short for the outage and its recovery.
    """
    restarts = []
    for service in dict.fromkeys(services):
        if service == "database":
            if not (database_url or "").startswith(("postgres://", "postgresql://")):
                raise ValueError("--restart database needs --database-url postgresql://... (the soak's own SQLite has no server to stop)")
            restarts.append(Restart("database", RESTART_AT[service] * duration, down_s, commands.get("db_stop") or soak_restarts.DB_STOP,
                                    commands.get("db_start") or soak_restarts.DB_START, soak_restarts.database_ready(database_url or "")))
        elif service == "cache":
            if not redis_url:
                raise ValueError("--restart cache needs --redis-url redis://... (without it the cache is in each process)")
            restarts.append(Restart("cache", RESTART_AT[service] * duration, down_s, commands.get("redis_stop") or soak_restarts.REDIS_STOP,
                                    commands.get("redis_start") or soak_restarts.REDIS_START, soak_restarts.cache_ready(redis_url)))
        else:
            raise ValueError(f"unknown service to restart {service!r}: use database or cache")
    for restart in restarts:
        if down_s <= 0 or restart.at_s + down_s + RECOVERY_TARGET_S > duration:
            raise ValueError(f"the {restart.service} restart at {restart.at_s:.0f} s, down {down_s:.0f} s, and its {RECOVERY_TARGET_S:.0f} s "
                             f"to recover do not fit a {duration:.0f} s run: raise --duration or lower --down-seconds")
    return restarts


def bench_soak(duration: float = 300.0, rps: float = 5.0, var_dir: str | None = None, warmup: float = 20.0, workers: int = 1,
               database_url: str | None = None, redis_url: str | None = None, restart: list[str] | None = None, down_s: float = 10.0,
               commands: dict[str, str] | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the soak (see the module docstring) and return its report.

    ``workers``, ``database_url`` and ``redis_url``: the scaled-out setup (uvicorn processes on a shared
    PostgreSQL and Redis); routing events are then counted in PostgreSQL. ``restart`` ("database",
    "cache"): stop that server for ``down_s`` seconds mid-run with ``commands`` (see ``plan_restarts``);
    whatever happens, every server it may have stopped is started again before this returns.
    """
    if duration < 30 or rps <= 0:
        raise ValueError("duration must be at least 30 s (the fault schedule needs room) and rps positive")
    restarts = plan_restarts(restart or [], duration, down_s, database_url, redis_url, commands or {})
    for planned in restarts:
        if not planned.ready():
            raise RuntimeError(f"the {planned.service} does not answer before the soak; start it first ({planned.start!r})")
    folder = Path(var_dir) if var_dir else Path(tempfile.mkdtemp(prefix="switchboard-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    deployment = deployment_env(database_url, redis_url)
    prepare_demo(folder, say, deployment)
    faults_file = folder / "soak-faults.json"
    faults.write(faults_file, {})
    questions = held_out_questions()
    try:
        with Server(folder, _free_port(), workers=workers, env={**deployment, faults.ENV_VAR: str(faults_file)}) as server:
            say(f"starting uvicorn on {server.base}, data in {folder}, faults in {faults_file}")
            server.wait_ready()
            experts = _experts(server.base)
            # Every held-out question once at least, at the soak's own rate: memory grows with the distinct passages
            # served (caches, allocators), not with time, so rss_start is read once they have all been seen.
            warm_s = max(warmup, len(questions) / rps)
            say(f"warming up for {warm_s:.0f} s at {rps} requests/s (every held-out question once: {len(questions)}) ...")
            warm, _ = asyncio.run(_load(server.base, questions, rps, warm_s, [], faults_file, say, "warm"))
            if not warm.answered:
                raise RuntimeError(f"no answer during the warm-up: {warm.errors} {warm.lost}; see {server.log_path}")
            assert server.proc is not None
            rss_start = rss_mb(server.proc.pid)
            phases = schedule(duration, experts)
            say(f"soaking: {rps} requests/s for {duration:.0f} s with {len(phases)} faults scheduled ...")
            load_before = os.getloadavg()
            tally, wall = asyncio.run(_load(server.base, questions, rps, duration, phases, faults_file, say, "soak", restarts))
            rss_end = rss_mb(server.proc.pid)
            faults.write(faults_file, {})
    finally:
        services_after = {r.service: soak_restarts.ensure_up(r) for r in restarts}  # CI and other people use these servers
        for service, state in services_after.items():
            if state != "up":
                say(f"{service} after the soak: {state}")
    missing, duplicated = _event_counts(folder / "switchboard.sqlite3", tally.answered, database_url)
    requests = len(tally.answered) + sum(tally.errors.values()) + sum(tally.lost.values())
    report: dict[str, Any] = {
        "requests": requests,
        "errors": dict(sorted(tally.errors.items())),
        "fallbacks": tally.fallbacks,
        "lost": sum(tally.lost.values()),
        "p99_ms": round(_percentile(tally.latencies_ms, 99), 1),
        "rss_start_mb": rss_start,
        "rss_end_mb": rss_end,
        "answered": len(tally.answered),
        "lost_kinds": dict(tally.lost),
        "answered_by": dict(sorted(tally.answered_by.items())),
        "p50_ms": round(_percentile(tally.latencies_ms, 50), 1),
        "events_missing": len(missing),
        "events_duplicated": len(duplicated),
        "events_missing_ids": missing[:5],
        "rss_growth": round((rss_end - rss_start) / rss_start, 4) if rss_start else None,
        "duration_s": round(wall, 1),
        "rps_target": rps,
        "rps_sent": round(requests / wall, 2) if wall else None,
        "faults": [{"at_s": p.start, "seconds": p.seconds, "fault": p.label} for p in phases],
        "cpus": os.cpu_count(),
        "load_avg_before": [round(x, 2) for x in load_before],
        "var_dir": str(folder),
        "server_processes": workers,
        "database": "postgresql" if database_url else "sqlite",
        "cache": "redis" if redis_url else "local memory",
    }
    if restarts:
        report["restarts"] = soak_restarts.restart_reports(restarts, tally.timeline)
        report["services_after"] = services_after
    report["targets"] = {
        "lost == 0": report["lost"] == 0,
        "no missing or duplicated events": not missing and not duplicated,
        "memory growth <= 10%": report["rss_growth"] is not None and report["rss_growth"] <= 0.10,
    }
    for row in report.get("restarts", []):
        recovered = row["recovery_s"] is not None and row["recovery_s"] <= RECOVERY_TARGET_S
        report["targets"][f"{row['service']} back within {RECOVERY_TARGET_S:.0f} s of its return"] = recovered and not row["error"]
        clean = "answers or clean 503s" if row["service"] == "database" else "answers (or a scheduled fault's 503s)"
        report["targets"][f"{row['service']} down: {clean} only"] = row["stopped_at_s"] is not None and not row["unclean_while_down"]
    return report
