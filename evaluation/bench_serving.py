"""``manage.py bench serving``: throughput and latency of the chat API over HTTP, against the encoder alone.

The demo is loaded into a data folder through the real pipeline and served by uvicorn as
``run_platform`` starts it; after a warm-up, ``concurrency`` keep-alive clients post held-out demo
questions for ``duration`` seconds. The encoder alone, at the server's thread count, is measured before
and after the run (``encoder_rps_single``, ``encoder_rps_batched``, the mean of the two runs: the
machine's speed drifts). The report says the CPUs and the load average, since other work skews every figure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.conf import settings

from encoders import base as encoder_base
from encoders import registry as encoder_registry
from encoders import serving_threads
from evaluation.datasets import read_queries
from sbcommon.env import envbool

READY_MARKER = ".bench-demo-ready"
ENCODER_BATCH = 32
WARMUP_WINDOW_S = 5.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(var_dir: Path, **extra: str) -> dict[str, str]:
    root = Path(settings.BASE_DIR)
    env = os.environ.copy()
    env.update({
        "VAR_DIR": str(var_dir),
        "PYTHONPATH": os.pathsep.join([str(root / "platform"), str(root)]),
        "DJANGO_SETTINGS_MODULE": "switchboard.settings",
        "GENERATOR": "extractive",
        "PYTHONUNBUFFERED": "1",
    })
    for name in ("DATABASE_URL", "QDRANT_URL", "CELERY_BROKER_URL"):
        env.pop(name, None)  # everything lives in the bench's own data folder
    env.update(extra)
    _share_encoder_exports(var_dir)
    return env


def _share_encoder_exports(var_dir: Path) -> None:
    """The encoder's ONNX export (keyed by the weights' checksum, never changed once made) is shared, not made
    again in every data folder the bench loads: the folder's ``models/encoders`` links to this process's."""
    link, target = var_dir / "models" / "encoders", Path(settings.ENCODER_EXPORT_DIR)
    if link.exists() or link.is_symlink():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    target.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target, target_is_directory=True)


def served_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """``_env`` as a bench's server runs: no eager Celery (so events are written behind the request), the chat API open."""
    return _env(var_dir, CELERY_TASK_ALWAYS_EAGER="0", CHAT_API_REQUIRE_AUTH="0", **extra)


def deployment_env(database_url: str | None = None, redis_url: str | None = None) -> dict[str, str]:
    """The servers a scaled-out deployment shares, as environment: PostgreSQL (``DATABASE_URL``) and Redis
    (``REDIS_URL``: the cache behind rate limits, breakers and serving state). Empty: the bench's own files."""
    return {name: url for name, url in (("DATABASE_URL", database_url), ("REDIS_URL", redis_url)) if url}


def prepare_demo(var_dir: Path, say: Callable[[str], None], deployment: dict[str, str] | None = None, backend: str | None = None) -> float:
    """Migrate and load the demo into ``var_dir`` (and ``deployment``'s database) unless a previous bench already did; returns seconds spent.

    ``backend`` (an ``EMBEDDING_BACKEND``; default: the configured one) embeds the demo's queries and documents.
    """
    if (var_dir / READY_MARKER).exists():
        say(f"reusing the demo in {var_dir}")
        return 0.0
    t0 = time.monotonic()
    root = Path(settings.BASE_DIR)
    extra = {"EMBEDDING_BACKEND": backend} if backend else {}
    env = _env(var_dir, CELERY_TASK_ALWAYS_EAGER="1", SWITCHBOARD_WARMUP="0", **(deployment or {}), **extra)
    for argv in (["migrate", "--noinput"], ["load_demo"]):
        say(f"running manage.py {' '.join(argv)} in {var_dir} ...")
        done = subprocess.run([sys.executable, str(root / "manage.py"), *argv], cwd=root, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"manage.py {argv[0]} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    (var_dir / READY_MARKER).write_text("demo loaded\n")
    return time.monotonic() - t0


class Server:
    """uvicorn serving the platform from ``var_dir``, output to a log file in it; stopped on exit."""

    def __init__(self, var_dir: Path, port: int, workers: int = 1, env: dict[str, str] | None = None):
        self.var_dir, self.port, self.workers, self.extra_env = var_dir, port, workers, dict(env or {})
        self.base = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = var_dir / "bench-server.log"

    def __enter__(self) -> Server:
        root = Path(settings.BASE_DIR)
        argv = [sys.executable, "-m", "uvicorn", "switchboard.asgi:application", "--host", "127.0.0.1", "--port", str(self.port),
                "--lifespan", "on", "--timeout-graceful-shutdown", "10", "--no-access-log"]

        if self.workers > 1:
            argv += ["--workers", str(self.workers)]
        self._log = self.log_path.open("w")
        env = served_env(self.var_dir, **self.extra_env)
        self.proc = subprocess.Popen(argv, cwd=root, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        return self

    def wait_ready(self, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with code {self.proc.returncode}; see {self.log_path}")
            with contextlib.suppress(urllib.error.URLError, OSError), urllib.request.urlopen(f"{self.base}/readyz", timeout=5) as response:
                if response.status == 200:
                    return
            time.sleep(0.5)
        raise RuntimeError(f"the server was not ready within {timeout:.0f} s; see {self.log_path}")

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


def held_out_questions(demo_dir: Path | None = None) -> list[str]:
    """The demo's test-split questions, less any whose text also appears in training (a few do)."""
    rows = read_queries(Path(demo_dir or settings.DEMO_DIR))
    trained = {r["text"] for r in rows if r.get("split") != "test"}
    questions = [r["text"] for r in rows if r.get("split") == "test" and r["text"] not in trained]
    return questions or [r["text"] for r in rows]


def unique_question(questions: list[str], n: int, run: str) -> str:
    """The ``n``-th question of a run, made unique with a reference number.

    The encoder keeps a cache of recent vectors (passage sentences recur in every answer). Without
    the suffix, a question asked again would be a cache hit and the bench would measure no encoder
    work at all; with it, every request pays for its own question's embedding, as with real traffic.
    """
    return f"{questions[n % len(questions)]} (ref {run}-{n})"


class HttpConnection:
    """One keep-alive HTTP/1.1 connection that POSTs JSON: the load generator's client.

    The clients share the two cores with the server, so they are kept as lean as wrk's: a request
    is one ``write`` and the response is read by ``Content-Length`` (or chunks). httpx spent ~3x the
    CPU per request here, all of it taken from the server being measured.
    """

    def __init__(self, base: str, timeout: float = 60.0):
        host_port = base.split("://", 1)[1].rstrip("/")
        self.host, port = host_port.rsplit(":", 1)
        self.port, self.timeout = int(port), timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        """(status, body); raises ``OSError`` or ``asyncio.IncompleteReadError`` (the connection is then dropped)."""
        try:
            return await asyncio.wait_for(self._post(path, json.dumps(payload).encode()), self.timeout)
        except BaseException:
            await self.close()
            raise

    async def _post(self, path: str, body: bytes) -> tuple[int, bytes]:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._writer.write(b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (path.encode(), self.host.encode(), self.port, len(body), body))
        head = (await self._reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split(" ", 2)[1])
        headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in head[1:] if line)}
        if "content-length" in headers:
            data = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while size := int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16):
                parts.append(await self._reader.readexactly(size + 2))
            await self._reader.readuntil(b"\r\n")
            data = b"".join(p[:-2] for p in parts)
        else:
            data = await self._reader.read()
        if headers.get("connection", "").lower() == "close":
            await self.close()
        return status, data

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def _drive(base: str, questions: list[str], concurrency: int, duration: float, model: str, run: str,
                 min_requests: int = 0) -> dict[str, Any]:
    """``concurrency`` clients posting unique questions for ``duration`` seconds (and at least ``min_requests``)."""
    latencies: list[float] = []
    stage_ms: dict[str, list[float]] = {}
    errors: Counter[str] = Counter()
    counter = iter(range(10**9))
    sent = 0
    deadline = time.perf_counter() + duration

    def more() -> bool:
        return time.perf_counter() < deadline or sent < min_requests

    async def client() -> None:
        nonlocal sent
        http = HttpConnection(base)
        try:
            while more():
                sent += 1
                question = unique_question(questions, next(counter), run)
                body = {"model": model, "messages": [{"role": "user", "content": question}]}
                t0 = time.perf_counter()
                try:
                    status, data = await http.post("/v1/chat/completions", body)
                except (TimeoutError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
                    errors[type(exc).__name__] += 1
                    continue
                elapsed = (time.perf_counter() - t0) * 1000
                if status != 200:
                    errors[str(status)] += 1
                    continue
                latencies.append(elapsed)
                for name, value in (json.loads(data).get("switchboard", {}).get("timings_ms") or {}).items():
                    stage_ms.setdefault(name, []).append(float(value))
        finally:
            await http.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    wall = time.perf_counter() - started
    return {"latencies": latencies, "stage_ms": stage_ms, "errors": dict(errors), "wall": wall}


def _scrape(base: str) -> list[Any]:
    """The server's /metrics samples (one process's view); empty when it cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as response:
            text = response.read().decode()
    except (urllib.error.URLError, OSError):
        return []
    return [sample for family in text_string_to_metric_families(text) for sample in family.samples]


def encoder_batches(base: str) -> dict[str, float]:
    """Forward passes, texts encoded and mean texts per pass of the server's encoder so far, from its /metrics."""
    values = {s.name: s.value for s in _scrape(base) if s.name.startswith("switchboard_encoder_batch_size")}
    passes = values.get("switchboard_encoder_batch_size_count", 0.0)
    texts = values.get("switchboard_encoder_batch_size_sum", 0.0)
    return {"forward_passes": passes, "texts": texts, "mean_batch": round(texts / passes, 2) if passes else 0.0}


def cache_lookups(base: str) -> dict[str, dict[str, float]]:
    """``{cache: {"hit": n, "miss": n}}`` from the server's ``switchboard_cache_lookups_total``."""
    found: dict[str, dict[str, float]] = {}
    for sample in _scrape(base):
        if sample.name == "switchboard_cache_lookups_total":
            found.setdefault(sample.labels["cache"], {})[sample.labels["result"]] = sample.value
    return found


def miss_rate(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], cache: str) -> float | None:
    """Share of one cache's lookups between two scrapes that missed (None: no lookup)."""
    hits = after.get(cache, {}).get("hit", 0.0) - before.get(cache, {}).get("hit", 0.0)
    misses = after.get(cache, {}).get("miss", 0.0) - before.get(cache, {}).get("miss", 0.0)
    return round(misses / (hits + misses), 4) if hits + misses > 0 else None


def _stat(pid: int | str) -> tuple[int, float] | None:
    """(parent pid, user + system CPU seconds) of one process (Linux ``/proc``); None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # ppid, utime, stime
    except (OSError, IndexError, ValueError):
        return None


def _every_stat() -> dict[int, tuple[int, float]]:
    """``_stat`` of every process, by pid."""
    return {int(entry.name): stat for entry in Path("/proc").iterdir() if entry.name.isdigit() and (stat := _stat(entry.name))}


def process_tree(root: int, stats: dict[int, tuple[int, float]] | None = None) -> dict[int, int]:
    """``root`` and every process below it, each with its depth under ``root`` (``stats``: ``_every_stat``'s, read now when None)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in (stats or _every_stat()).items():
        children.setdefault(ppid, []).append(pid)
    depth, todo = {root: 0}, [root]
    while todo:
        pid = todo.pop()
        for child in children.get(pid, []):
            depth[child] = depth[pid] + 1
            todo.append(child)
    return depth


def process_tree_cpu(root_pid: int) -> dict[str, float]:
    """CPU seconds per process of the tree under ``root_pid``, keyed ``"<pid> <role>"``.

    Roles: the root is the "web server"; a process started by multiprocessing below it is an
    "encoder child", except where the root supervises several uvicorn workers (``--workers N``):
    then the root is the "web supervisor", its spawned children that start children of their own
    are each a "web server", and theirs are "encoder child"ren.
    """
    stats = _every_stat()
    depth = process_tree(root_pid, stats)
    cmdlines: dict[int, bytes] = {}
    for pid in depth:
        with contextlib.suppress(OSError):  # gone since
            cmdlines[pid] = Path(f"/proc/{pid}/cmdline").read_bytes()

    def spawned(pid: int) -> bool:
        return b"spawn_main" in cmdlines.get(pid, b"")

    workers = {pid for pid in cmdlines if depth[pid] == 1 and spawned(pid) and any(depth[c] == 2 and stats[c][0] == pid and spawned(c) for c in cmdlines)}
    found = {}
    for pid, cmdline in cmdlines.items():
        if pid == root_pid:
            name = "web supervisor" if workers else "web server"
        elif pid in workers:
            name = "web server"
        else:
            name = "resource tracker" if b"resource_tracker" in cmdline else "encoder child" if spawned(pid) else "child"
        found[f"{pid} {name}"] = stats[pid][1] if pid in stats else 0.0
    return found


def cpu_ms_per_request(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    """CPU milliseconds per served request of each role between two readings of ``process_tree_cpu``.

    Processes of one role (two web workers, their two encoder children) are added up: the CPU a
    request costs in that role, whatever the number of processes sharing it.
    """
    if not requests:
        return {}
    totals: dict[str, float] = {}
    for key in after:
        role = key.split(" ", 1)[1]
        totals[role] = totals.get(role, 0.0) + (after[key] - before.get(key, 0.0)) * 1000 / requests
    return {role: round(value, 2) for role, value in totals.items()}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def encoder_throughput(questions: list[str], encoder: Any, seconds: float = 8.0) -> dict[str, float]:
    """Queries per second of the bare encoder: one query at a time, and batches of 32.

    The texts are the ones the server is sent (``unique_question``: the reference number adds a few
    tokens), so both sides of the comparison encode the same work.
    """
    texts = [unique_question(questions, n, "enc") for n in range(max(len(questions), ENCODER_BATCH))]
    encoder.encode(texts[:ENCODER_BATCH], batch_size=ENCODER_BATCH)  # warm-up

    def rate(size: int) -> float:
        """Texts encoded a second, ``size`` at a time, for ``seconds``."""
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            encoder.encode([texts[(n + j) % len(texts)] for j in range(size)], batch_size=size)
            n += size
        return n / (time.perf_counter() - t0)

    return {"encoder_rps_single": round(rate(1), 1), "encoder_rps_batched": round(rate(ENCODER_BATCH), 1)}


def bench_serving(concurrency: int = 16, duration: float = 30.0, var_dir: str | None = None, warmup: float = 5.0, workers: int = 1,
                  model: str = "auto", encoder_seconds: float = 8.0, max_warmup: float = 180.0, max_chunk_miss_rate: float = 0.01,
                  backends: list[str] | None = None, database_url: str | None = None, redis_url: str | None = None,
                  models: list[str] | None = None, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the serving benchmark (see the module docstring) and return its report.

    ``models`` are measured in turn (``by_model``; ``fast_tier_rps_ratio`` with both ``auto`` and
    ``auto:fast``), and ``backends`` in turn (``by_backend``; default: the configured one, then
    ``torch``), the first giving the top-level figures. ``database_url`` and ``redis_url`` run the
    ``workers`` on a shared PostgreSQL and Redis, as a scaled-out deployment.
    """
    from encoders import embedding_space, resolve_backend

    if concurrency < 1 or duration <= 0:
        raise ValueError("concurrency must be at least 1 and duration positive")
    models = list(dict.fromkeys(models or [model]))
    if not models or not all(m.strip() for m in models):
        raise ValueError("models must name at least one chat model (auto, auto:fast or an expert's slug)")
    model = models[0]
    backends = list(dict.fromkeys(resolve_backend(b) for b in (backends or [resolve_backend(), "torch"])))
    folder = Path(var_dir) if var_dir else Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    load_before = os.getloadavg()
    deployment = deployment_env(database_url, redis_url)
    # A backend of another embedding space (onnx-int8) serves a demo embedded and trained in its own space,
    # in a folder of its own: the torch-space demo's collections and router would not fit its vectors.
    home = embedding_space(settings.EMBEDDING_MODEL, "torch")
    folders = {b: folder if embedding_space(settings.EMBEDDING_MODEL, b) == home else folder / f"space-{b}" for b in backends}
    if database_url and len(set(folders.values())) > 1:
        raise ValueError(f"with --database-url measure backends of one embedding space per run ({', '.join(backends)} are not)")
    demo_s = 0.0
    runs = {}
    for backend in backends:
        say(f"--- encoder backend {backend} ---")
        folders[backend].mkdir(parents=True, exist_ok=True)
        demo_s += prepare_demo(folders[backend], say, deployment, backend=backend)
        runs[backend] = _bench_backend(backend, folders[backend], concurrency, duration, warmup, workers, model, encoder_seconds, max_warmup,
                                       max_chunk_miss_rate, say, deployment)
    by_model = {model: runs[backends[0]]}
    for other in models[1:]:
        say(f"--- model {other} (encoder backend {backends[0]}) ---")
        by_model[other] = _bench_backend(backends[0], folders[backends[0]], concurrency, duration, warmup, workers, other, encoder_seconds, max_warmup,
                                         max_chunk_miss_rate, say, deployment)
    figures = ("rps", "p50_ms", "p95_ms", "p99_ms", "errors", "encoder_rps_single", "encoder_rps_batched", "cpu_ms_per_request", "stage_p50_ms",
               "encoder_mean_pass_during_run")
    report = {**runs[backends[0]], "backend": backends[0]}
    report["by_backend"] = {b: {**{k: r.get(k) for k in figures}, "embedding_space": embedding_space(settings.EMBEDDING_MODEL, b)} for b, r in runs.items()}
    report["by_model"] = {m: {**{k: r.get(k) for k in figures}, "encoder_texts_per_request": r["encoder_texts_per_request"]} for m, r in by_model.items()}
    if "auto" in by_model and "auto:fast" in by_model:
        report["fast_tier_rps_ratio"] = round(by_model["auto:fast"]["rps"] / max(1e-9, by_model["auto"]["rps"]), 2)
    if "torch" in runs and backends[0] != "torch":
        report["targets"]["rps >= 2 x torch's rps"] = runs[backends[0]]["rps"] >= 2 * runs["torch"]["rps"]
    report.update(load_avg_before=[round(x, 2) for x in load_before], demo_load_s=round(demo_s, 1), var_dir=str(folder),
                  database="postgresql" if database_url else "sqlite", cache="redis" if redis_url else "local memory")
    return report


def _bench_backend(backend: str, folder: Path, concurrency: int, duration: float, warmup: float, workers: int, model: str,
                   encoder_seconds: float, max_warmup: float, max_chunk_miss_rate: float, say: Callable[[str], None],
                   deployment: dict[str, str] | None = None) -> dict[str, Any]:
    """One backend's run: the encoder alone before and after, and the server under load in between."""
    from encoders import make_encoder

    questions = held_out_questions()
    say(f"measuring the encoder alone before the run ({encoder_seconds:.0f} s single, {encoder_seconds:.0f} s batched) ...")
    # The server's encoder runs its forward passes with ENCODER_THREADS threads (default: TORCH_THREADS).
    bare = make_encoder(settings.EMBEDDING_MODEL, threads=serving_threads(), backend=backend)
    encoder_before = encoder_throughput(questions, bare, seconds=encoder_seconds)
    port = _free_port()
    with Server(folder, port, workers=workers, env={"EMBEDDING_BACKEND": backend, **(deployment or {})}) as server:
        say(f"starting uvicorn on {server.base} ({workers} process{'es' if workers > 1 else ''}), data in {folder}")
        server.wait_ready()
        # The warm-up asks every held-out question once at least, so the passages they retrieve are in
        # the encoder's sentence cache, as in a server that has been up for a while.
        say(f"warming up: {warmup:.0f} s and every held-out question once ({len(questions)}) ...")
        warm_t0 = time.monotonic()
        warm = asyncio.run(_drive(server.base, questions, concurrency, warmup, model, "warm", min_requests=len(questions)))
        if not warm["latencies"]:
            raise RuntimeError(f"no successful request during the warm-up: {warm['errors']}; see {server.log_path}")
        warm_requests, window_miss_rate = len(warm["latencies"]), None
        # A fresh server splits and encodes every chunk it retrieves the first time (the extractive
        # generator's sentence cache): steady state is when that has stopped. Warm up in windows
        # until at most max_chunk_miss_rate of the chunk lookups miss, or max_warmup seconds.
        while time.monotonic() - warm_t0 < max_warmup:
            before = cache_lookups(server.base)
            window = asyncio.run(_drive(server.base, questions, concurrency, WARMUP_WINDOW_S, model, f"warm{warm_requests}"))
            warm_requests += len(window["latencies"])
            window_miss_rate = miss_rate(before, cache_lookups(server.base), "chunk_sentences")
            say(f"  warm-up window: {len(window['latencies'])} requests, chunk sentence cache miss rate {window_miss_rate}")
            if window_miss_rate is None or window_miss_rate <= max_chunk_miss_rate:
                break
        warmup_s = time.monotonic() - warm_t0
        say(f"driving {concurrency} concurrent clients for {duration:.0f} s ...")
        load_during = os.getloadavg()
        caches_before, batches_before = cache_lookups(server.base), encoder_batches(server.base)
        assert server.proc is not None
        cpu_before, bench_cpu_before = process_tree_cpu(server.proc.pid), time.process_time()
        run = asyncio.run(_drive(server.base, questions, concurrency, duration, model, "run"))
        cpu_after, bench_cpu_after = process_tree_cpu(server.proc.pid), time.process_time()
        caches_after = cache_lookups(server.base)
        batches = encoder_batches(server.base)
    say(f"measuring the encoder alone after the run ({encoder_seconds:.0f} s single, {encoder_seconds:.0f} s batched) ...")
    encoder_after = encoder_throughput(questions, bare, seconds=encoder_seconds)
    encoder = {name: round((encoder_before[name] + encoder_after[name]) / 2, 1) for name in encoder_before}
    latencies = run["latencies"]
    rps = len(latencies) / run["wall"]
    report: dict[str, Any] = {
        "rps": round(rps, 1),
        "p50_ms": round(_percentile(latencies, 50), 1),
        "p95_ms": round(_percentile(latencies, 95), 1),
        "p99_ms": round(_percentile(latencies, 99), 1),
        "errors": sum(run["errors"].values()),
        **encoder,
        "encoder_runs": {"before": encoder_before, "after": encoder_after},
        "concurrency": concurrency,
        "duration_s": round(run["wall"], 1),
        "requests": len(latencies),
        "warmup_requests": warm_requests,
        "warmup_s": round(warmup_s, 1),
        "warmup_last_chunk_miss_rate": window_miss_rate,
        "chunk_cache_miss_rate": miss_rate(caches_before, caches_after, "chunk_sentences"),
        "encoder_cache_miss_rate": miss_rate(caches_before, caches_after, "encoder"),
        "warmup_errors": warm["errors"],
        "error_kinds": run["errors"],
        "model": model,
        "server_processes": workers,
        "torch_threads": settings.TORCH_THREADS,
        "encoder_threads": serving_threads(),
        "encoder_sub_batch": encoder_base.SUB_BATCH,
        "encoder_in_child_process": envbool("ENCODER_PROCESS", True),  # the server's view: switchboard.asgi defaults it on
        "encoder_max_batch": encoder_registry.MAX_BATCH,
        "encoder_max_wait_ms": encoder_registry.MAX_WAIT_MS,
        "server_encoder_batches": batches,
        # Texts the server encoded per request during the run: the question, and the sentences of
        # retrieved chunks not yet in the chunk sentence cache.
        "encoder_texts_per_request": round((batches["texts"] - batches_before["texts"]) / max(1, len(latencies)), 3),
        "encoder_mean_pass_during_run": round((batches["texts"] - batches_before["texts"]) / max(1.0, batches["forward_passes"] - batches_before["forward_passes"]), 2),
        # Where the two cores went: CPU ms per served request of each server process and of the load generator.
        "cpu_ms_per_request": {**cpu_ms_per_request(cpu_before, cpu_after, len(latencies)),
                               "load generator": round((bench_cpu_after - bench_cpu_before) * 1000 / max(1, len(latencies)), 2)},
        "stage_p50_ms": {name: round(statistics.median(values), 2) for name, values in sorted(run["stage_ms"].items())},
        "cpus": os.cpu_count(),
        "load_avg_during": [round(x, 2) for x in load_during],
    }
    single, batched = report["encoder_rps_single"], report["encoder_rps_batched"]
    report["targets"] = {
        "rps >= 3 x encoder_rps_single": rps >= 3 * single,
        "rps >= 0.7 x encoder_rps_batched": rps >= 0.7 * batched,
        "p99_ms <= 4 x p50_ms": report["p99_ms"] <= 4 * report["p50_ms"],
        "errors == 0": report["errors"] == 0,
    }
    return report
