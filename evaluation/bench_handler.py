"""``manage.py bench handler``: the web process's own cost of one request through the ASGI handler, in process.

``requests`` sequential ``GET /healthz`` through ``switchboard.asgi`` and through Django's stock
``ASGIHandler`` (asgiref's ``ApplicationCommunicator``): CPU and wall milliseconds per request, the best
of ``rounds``, and thread crossings. ``--chat`` (``bench_chat``) measures the demo's chat requests in a
child process with the encoder in its own child: the web process's CPU without HTTP parsing. It moves
between identical runs: compare versions by alternating runs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PATH = "/healthz"


def scope(path: str, body: bytes | None = None) -> dict[str, Any]:
    """An ASGI HTTP scope: ``GET path``, or with ``body`` a JSON ``POST``."""
    headers = [(b"host", b"127.0.0.1")]
    if body is not None:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET" if body is None else "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("127.0.0.1", 80),
            "client": ("127.0.0.1", 5000), "headers": headers}


async def request(app: Any, path: str, body: bytes | None = None, timeout: float = 10) -> None:
    """One request through ``app`` in process (asgiref's ``ApplicationCommunicator``); anything but a 200 raises."""
    from asgiref.testing import ApplicationCommunicator

    communicator = ApplicationCommunicator(app, scope(path, body))
    await communicator.send_input({"type": "http.request", "body": body or b"", "more_body": False})
    start = await communicator.receive_output(timeout)
    if start.get("status") != 200:
        raise RuntimeError(f"{path} answered {start.get('status')} through {type(app).__name__}")
    while (await communicator.receive_output(timeout)).get("more_body"):
        pass
    await communicator.wait(5)


async def _requests(app: Any, n: int) -> None:
    for _ in range(n):
        await request(app, PATH)


def _crossings(make: Callable[[], Any]) -> int:
    """Thread crossings of one request: every sync_to_async hop submits to an executor."""
    from concurrent.futures import ThreadPoolExecutor

    submitted = 0
    original = ThreadPoolExecutor.submit

    def counting(self, *args, **kwargs):
        nonlocal submitted
        submitted += 1
        return original(self, *args, **kwargs)

    app = make()
    asyncio.run(_requests(app, 5))
    ThreadPoolExecutor.submit = counting  # type: ignore[method-assign]
    try:
        asyncio.run(_requests(app, 1))
    finally:
        ThreadPoolExecutor.submit = original  # type: ignore[method-assign]
    return submitted


def bench_handler(requests: int = 1000, rounds: int = 5, say: Callable[[str], None] = print) -> dict[str, Any]:
    from django.conf import settings
    from django.core.handlers.asgi import ASGIHandler
    from django.utils.module_loading import import_string

    served = import_string(settings.ASGI_APPLICATION)  # what uvicorn serves (switchboard.asgi.application)
    handlers: dict[str, Callable[[], Any]] = {"switchboard": lambda: served, "django_stock": ASGIHandler}
    report: dict[str, Any] = {"path": PATH, "requests": requests, "rounds": rounds,
                              "how": "sequential requests in process through each handler; best round of CPU and wall time per request"}
    for name, make in handlers.items():
        app = make()
        asyncio.run(_requests(app, min(200, requests)))  # warm-up: imports, the URL resolver, threads kept
        cpu, wall = [], []
        for _ in range(rounds):
            c0, t0 = time.process_time(), time.perf_counter()
            asyncio.run(_requests(app, requests))
            cpu.append((time.process_time() - c0) * 1000 / requests)
            wall.append((time.perf_counter() - t0) * 1000 / requests)
        report[name] = {"cpu_ms_per_request": round(min(cpu), 4), "wall_ms_per_request": round(min(wall), 4),
                        "thread_crossings_per_request": _crossings(make)}
        say(f"{name}: {report[name]['cpu_ms_per_request']:.3f} ms CPU a request, {report[name]['thread_crossings_per_request']} thread crossings")
    return report


def bench_chat(requests: int = 600, rounds: int = 3, concurrency: int = 8, var_dir: str | None = None,
               say: Callable[[str], None] = print) -> dict[str, Any]:
    """The web process's CPU a chat request, in process (see the module docstring); the demo is loaded into ``var_dir`` first if needed."""
    from django.conf import settings

    from evaluation.bench_serving import prepare_demo, served_env

    if requests < 1 or rounds < 1 or concurrency < 1:
        raise ValueError("requests, rounds and concurrency must be at least 1")
    folder = Path(var_dir) if var_dir else Path(tempfile.mkdtemp(prefix="switchboard-bench-"))
    folder.mkdir(parents=True, exist_ok=True)
    prepare_demo(folder, say)
    say(f"posting {rounds} x {requests} chat questions, {concurrency} at a time, through the served application in {folder} ...")
    done = subprocess.run([sys.executable, "-m", "evaluation.chat_probe", str(requests), str(rounds), str(concurrency)], cwd=settings.BASE_DIR,
                          env=served_env(folder, ENCODER_PROCESS="1", SWITCHBOARD_WARMUP="0"), capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the chat probe failed ({done.returncode}):\n{done.stderr[-3000:]}")
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    say(f"chat: {figures['cpu_ms_per_request']:.3f} ms of the web process's CPU a request (best of {rounds} rounds)")
    return {"path": "/v1/chat/completions", "requests": requests, "rounds": rounds, "concurrency": concurrency, "var_dir": str(folder), **figures,
            "how": "the demo's held-out questions, made unique, through the served ASGI application in a child process on the demo's data; "
                   "that process's CPU (the encoder's child not counted), best round"}
