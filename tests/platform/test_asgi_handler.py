"""switchboard.asgi: the middleware chain and the view run together in one thread per request, streams included."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from asgiref.testing import ApplicationCommunicator

from switchboard.asgi import OneThreadASGIHandler, django_application


def _scope(method: str, path: str, body: bytes = b"") -> dict:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http", "path": path,
            "raw_path": path.encode(), "query_string": b"", "root_path": "", "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]}


def _call(method: str, path: str, payload: dict | None = None, handler=None) -> tuple[int, dict[bytes, bytes], bytes]:
    body = json.dumps(payload).encode() if payload is not None else b""

    async def run():
        app = ApplicationCommunicator(handler or django_application, _scope(method, path, body))
        await app.send_input({"type": "http.request", "body": body, "more_body": False})
        start = await app.receive_output(30)
        parts = []
        while True:
            message = await app.receive_output(30)
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await app.wait(5)
        return start["status"], {k.lower(): v for k, v in start["headers"]}, b"".join(parts)

    return async_to_sync(run)()


def test_the_middleware_chain_is_built_synchronous():
    assert isinstance(django_application, OneThreadASGIHandler)
    assert not iscoroutinefunction(django_application._middleware_chain)


def test_a_request_through_the_handler_gets_the_middleware_headers():
    status, headers, _ = _call("GET", "/healthz")
    assert status == 200
    assert b"x-frame-options" in {k.lower() for k in headers}


@pytest.mark.django_db(transaction=True)
def test_a_chat_stream_through_the_handler_arrives_whole(serving):
    status, headers, raw = _call("POST", "/v1/chat/completions",
                                 {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "how do I renew my licence"}]})
    assert status == 200
    assert headers[b"content-type"].startswith(b"text/event-stream")
    blocks = [b for b in raw.decode().split("\n\n") if b.strip()]
    assert blocks[-1] == "data: [DONE]"
    text = "".join(json.loads(b[6:])["choices"][0]["delta"].get("content", "") for b in blocks[:-1])
    assert text == "dmv says: The dmv office handles this. [1]"


@pytest.mark.django_db(transaction=True)
def test_a_plain_chat_request_through_the_handler(serving):
    status, headers, raw = _call("POST", "/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": "how do I renew my licence"}]})
    assert status == 200
    assert headers[b"x-switchboard-expert"] == b"dmv"
    assert json.loads(raw)["choices"][0]["message"]["content"] == "dmv says: The dmv office handles this. [1]"


def test_requests_reuse_the_handlers_threads(settings):
    settings.REQUEST_THREADS_KEEP = 4  # the test settings keep none (see there)
    handler = OneThreadASGIHandler()
    for _ in range(3):
        assert _call("GET", "/healthz", handler=handler)[0] == 200
    assert handler.threads.started == 1  # one-at-a-time requests share one kept thread


def test_the_thread_pool_keeps_at_most_its_limit_idle():
    from switchboard.asgi import RequestThreads

    pool = RequestThreads(keep=1)
    first, second = pool.take(), pool.take()
    assert first is not second
    assert pool.started == 2
    pool.give(first)
    pool.give(second)  # over the limit: shut down
    assert pool.take() is first
    assert second._shutdown


@pytest.mark.parametrize("path", ["/healthz", "/missing-page/"])
def test_a_request_starts_runs_and_finishes_in_its_one_thread(path, settings):
    import threading

    from django.core import signals

    settings.REQUEST_THREADS_KEEP = 4
    seen: dict[str, int] = {}

    def started(**kwargs):
        seen["started"] = threading.get_ident()

    def finished(**kwargs):
        seen["finished"] = threading.get_ident()

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        handler = OneThreadASGIHandler()
        status = _call("GET", path, handler=handler)[0]
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert status in (200, 404)
    # request_started, the view and request_finished (the response's close, which closes the
    # thread's database connection when it is old) ran in the thread the request borrowed
    (executor,) = handler.threads._idle
    (thread,) = executor._threads
    assert seen == {"started": thread.ident, "finished": thread.ident}


def test_a_complete_response_crosses_to_its_thread_once():
    from concurrent.futures import ThreadPoolExecutor

    class Counting(ThreadPoolExecutor):
        submitted = 0

        def submit(self, *args, **kwargs):
            Counting.submitted += 1
            return super().submit(*args, **kwargs)

    handler = OneThreadASGIHandler()
    handler.threads.take = lambda: Counting(max_workers=1)
    handler.threads.give = lambda executor: executor.shutdown(wait=False)
    assert _call("GET", "/healthz", handler=handler)[0] == 200
    assert Counting.submitted == 1  # Django's own handler: 3 (request_started, the view, the close)


def test_bench_handler_reports_each_handlers_cost_and_crossings():
    from evaluation.bench_handler import bench_handler

    report = bench_handler(requests=20, rounds=1, say=lambda *_: None)
    assert report["switchboard"]["thread_crossings_per_request"] == 1
    assert report["django_stock"]["thread_crossings_per_request"] == 3
    assert all(report[h]["cpu_ms_per_request"] > 0 for h in ("switchboard", "django_stock"))


def test_bench_chat_runs_the_probe_on_the_demos_data_and_reports_its_best_round(tmp_path, monkeypatch):
    import subprocess

    from evaluation import bench_handler, bench_serving

    prepared, runs = [], []
    monkeypatch.setattr(bench_serving, "prepare_demo", lambda folder, say: prepared.append(folder) or 0.0)

    def probe(argv, cwd, env, capture_output, text):
        runs.append((argv, env))
        line = '{"cpu_ms_per_request": 4.5, "wall_ms_per_request": 9.0, "cpu_ms_by_round": [4.9, 4.5]}'
        return subprocess.CompletedProcess(argv, 0, stdout=f"log line\n{line}\n", stderr="")

    monkeypatch.setattr(bench_handler.subprocess, "run", probe)
    report = bench_handler.bench_chat(requests=50, rounds=2, concurrency=4, var_dir=str(tmp_path), say=lambda *_: None)
    assert prepared == [tmp_path]
    (argv, env), = runs
    assert argv[1:] == ["-m", "evaluation.chat_probe", "50", "2", "4"]
    assert env["VAR_DIR"] == str(tmp_path)
    assert env["ENCODER_PROCESS"] == "1"  # the encoder in its own child, as served: its CPU is not the web process's
    assert env["CELERY_TASK_ALWAYS_EAGER"] == "0"  # so events are written behind the request (EVENTS_SYNC follows it), as a bench server writes them
    assert report["cpu_ms_per_request"] == 4.5
    assert report["cpu_ms_by_round"] == [4.9, 4.5]


def test_bench_chat_refuses_nonsense_and_reports_a_failed_probe(tmp_path, monkeypatch):
    import subprocess

    import pytest

    from evaluation import bench_handler, bench_serving

    with pytest.raises(ValueError, match="at least 1"):
        bench_handler.bench_chat(requests=0, var_dir=str(tmp_path))
    monkeypatch.setattr(bench_serving, "prepare_demo", lambda folder, say: 0.0)
    monkeypatch.setattr(bench_handler.subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, stdout="", stderr="no router"))
    with pytest.raises(RuntimeError, match="no router"):
        bench_handler.bench_chat(requests=5, rounds=1, var_dir=str(tmp_path), say=lambda *_: None)
