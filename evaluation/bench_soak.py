"""``manage.py bench soak``: a bounded load on loopback with faults injected on a schedule.

The demo is served by uvicorn (``bench serving``'s pieces) with ``SWITCHBOARD_FAULTS_FILE`` in its
folder; after a warm-up, ``rps`` requests a second are sent open-loop for ``duration`` seconds while
the schedule rewrites the faults file (``sbcommon.faults``: a generator or the store fails or stalls).
Resident memory is read before and after, and every answered request must have exactly one routing
event. Each request ends as an answer (``fallbacks``: given by another expert after a failure), a clean
JSON error (``errors`` by kind), or ``lost`` (timeout, dropped, not the API's body), which must stay 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sbcommon import faults

from .bench_serving import Server, _free_port, _percentile, deployment_env, held_out_questions, prepare_demo, unique_question

REQUEST_TIMEOUT_S = 60.0
# Connections open at once. Requests due while all are busy wait on the client (their wait counts in
# their latency) rather than pile up inside an overloaded server until every one of them times out.
MAX_IN_FLIGHT = 8


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
    errors: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)
    fallbacks: int = 0
    answered_by: dict[str, int] = field(default_factory=dict)

    def add(self, bucket: dict[str, int], kind: str) -> None:
        bucket[kind] = bucket.get(kind, 0) + 1


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


def _tree_pids(root: int) -> list[int]:
    """``root`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def rss_mb(root: int) -> float:
    """Resident memory of the process tree under ``root``, in MiB (VmRSS from /proc)."""
    total_kb = 0
    for pid in _tree_pids(root):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return round(total_kb / 1024, 1)


def _experts(base: str) -> list[str]:
    """The experts the server offers (``/v1/models`` less the ``auto`` modes)."""
    with urllib.request.urlopen(f"{base}/v1/models", timeout=10) as response:
        models = [m["id"] for m in json.load(response).get("data", [])]
    return [m for m in models if not m.startswith("auto")]


def _classify(tally: Tally, status: int, body: bytes, elapsed_ms: float) -> None:
    try:
        payload = json.loads(body)
    except ValueError:
        tally.add(tally.lost, f"http_{status}_not_json")
        return
    if status == 200 and isinstance(payload, dict) and payload.get("choices"):
        content = (payload["choices"][0].get("message") or {}).get("content")
        if not isinstance(content, str) or not content:
            tally.add(tally.lost, "empty_answer")
            return
        meta = payload.get("switchboard") or {}
        tally.latencies_ms.append(elapsed_ms)
        tally.answered.append(str(payload.get("id", "")))
        tally.add(tally.answered_by, str(meta.get("expert") or "none"))
        if meta.get("failover_from"):
            tally.fallbacks += 1
        return
    error = payload.get("error") if isinstance(payload, dict) else None
    if status >= 400 and isinstance(error, dict) and error.get("message"):
        tally.latencies_ms.append(elapsed_ms)
        tally.add(tally.errors, f"{status}:{error.get('code') or error.get('type') or 'error'}")
        return
    tally.add(tally.lost, f"http_{status}_unexpected_body")


async def _load(base: str, questions: list[str], rps: float, duration: float, phases: list[Phase], faults_file: Path,
                say: Callable[[str], None], run: str) -> tuple[Tally, float]:
    """Send ``rps`` requests a second for ``duration`` seconds, switching faults per ``phases``; returns the tally and wall time."""
    import httpx

    tally = Tally()
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def one(http: httpx.AsyncClient, n: int) -> None:
        body = {"model": "auto", "messages": [{"role": "user", "content": unique_question(questions, n, run)}]}
        t0 = time.perf_counter()  # open loop: a request's latency includes any wait for a free connection
        async with gate:
            try:
                response = await http.post("/v1/chat/completions", json=body, timeout=REQUEST_TIMEOUT_S)
            except httpx.HTTPError as exc:
                tally.add(tally.lost, type(exc).__name__)
                return
            _classify(tally, response.status_code, response.content, (time.perf_counter() - t0) * 1000)

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
        tasks = []
        total = int(duration * rps)
        for n in range(total):
            await asyncio.sleep(max(0.0, started + n / rps - time.perf_counter()))
            tasks.append(asyncio.create_task(one(http, n)))
        await asyncio.gather(*tasks)
        driver.cancel()
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


def bench_soak(duration: float = 300.0, rps: float = 5.0, var_dir: str | None = None, warmup: float = 20.0, workers: int = 1,
               database_url: str | None = None, redis_url: str | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the soak (see the module docstring) and return its report.

    ``workers``, ``database_url`` and ``redis_url``: the scaled-out setup (uvicorn processes on a shared
    PostgreSQL and Redis); routing events are then counted in PostgreSQL.
    """
    if duration < 30 or rps <= 0:
        raise ValueError("duration must be at least 30 s (the fault schedule needs room) and rps positive")
    folder = Path(var_dir) if var_dir else Path(tempfile.mkdtemp(prefix="switchboard-soak-"))
    folder.mkdir(parents=True, exist_ok=True)
    deployment = deployment_env(database_url, redis_url)
    prepare_demo(folder, say, deployment)
    faults_file = folder / "soak-faults.json"
    faults.write(faults_file, {})
    questions = held_out_questions()
    previous = os.environ.get(faults.ENV_VAR)
    os.environ[faults.ENV_VAR] = str(faults_file)  # inherited by the server (bench serving's Server copies the environment)
    try:
        with Server(folder, _free_port(), workers=workers, env=deployment) as server:
            say(f"starting uvicorn on {server.base}, data in {folder}, faults in {faults_file}")
            server.wait_ready()
            experts = _experts(server.base)
            # The warm-up asks every held-out question once at least, at the soak's own rate: a server that has been
            # up a while has split and encoded the passages they retrieve (the generator's chunk cache, the encoder's
            # vector cache) and its native allocators (torch, glibc) have seen those input shapes. That memory grows
            # with the distinct passages served, not with time: with rss_start read after a few dozen requests it
            # showed up as 10-17% "growth" during the soak. A faster warm-up would not do: its bigger batches and
            # more threads leave a higher plateau (~+30%) than the soak's rate needs, and would hide a real leak.
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
            tally, wall = asyncio.run(_load(server.base, questions, rps, duration, phases, faults_file, say, "soak"))
            rss_end = rss_mb(server.proc.pid)
            faults.write(faults_file, {})
    finally:
        if previous is None:
            os.environ.pop(faults.ENV_VAR, None)
        else:
            os.environ[faults.ENV_VAR] = previous
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
        "lost_kinds": tally.lost,
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
    report["targets"] = {
        "lost == 0": report["lost"] == 0,
        "no missing or duplicated events": not missing and not duplicated,
        "memory growth <= 10%": report["rss_growth"] is not None and report["rss_growth"] <= 0.10,
    }
    return report
