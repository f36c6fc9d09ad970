"""The chat view's own CPU in process: ``bench handler --chat`` runs this module in a child with the demo's data.

``python -m evaluation.chat_probe REQUESTS ROUNDS CONCURRENCY`` posts unique demo questions through
``switchboard.asgi`` (the encoder in its child), ``CONCURRENCY`` at a time, and prints one JSON line:
this process's CPU and wall milliseconds per request, the best of ``ROUNDS``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

PATH = "/v1/chat/completions"


async def _round(app: Any, questions: list[str], n: int, concurrency: int, run: str) -> None:
    from evaluation.bench_handler import request
    from evaluation.bench_serving import unique_question

    numbers = iter(range(n))

    async def client() -> None:
        for i in numbers:
            body = {"model": "auto", "messages": [{"role": "user", "content": unique_question(questions, i, run)}]}
            await request(app, PATH, json.dumps(body).encode(), timeout=60)

    await asyncio.gather(*(client() for _ in range(concurrency)))


def main(argv: list[str]) -> None:
    requests, rounds, concurrency = (int(a) for a in argv)
    os.environ.setdefault("ENCODER_PROCESS", "1")  # as switchboard.asgi sets it for servers, before the settings load
    import django

    django.setup()
    from django.conf import settings
    from django.utils.module_loading import import_string

    from evaluation.bench_serving import held_out_questions

    app = import_string(settings.ASGI_APPLICATION)
    questions = held_out_questions()
    asyncio.run(_round(app, questions, max(200, requests // 2), concurrency, "warm"))  # imports, caches, the encoder child, threads
    cpu, wall = [], []
    for r in range(rounds):
        c0, t0 = time.process_time(), time.perf_counter()
        asyncio.run(_round(app, questions, requests, concurrency, f"round{r}"))
        cpu.append((time.process_time() - c0) * 1000 / requests)
        wall.append((time.perf_counter() - t0) * 1000 / requests)
    print(json.dumps({"cpu_ms_per_request": round(min(cpu), 4), "wall_ms_per_request": round(min(wall), 4),
                      "cpu_ms_by_round": [round(c, 4) for c in cpu]}))


if __name__ == "__main__":
    main(sys.argv[1:])
