"""``bench serving``: the client loop, the figures it reports, and (slow) a real run against the demo."""

from __future__ import annotations

import asyncio
import json

import pytest

from evaluation.bench_serving import _drive, _percentile, bench_serving, held_out_questions, unique_question


def test_every_request_sends_a_question_the_encoder_cache_has_never_seen():
    questions = ["a?", "b?"]
    sent = [unique_question(questions, n, "run") for n in range(6)]
    assert len(set(sent)) == 6
    assert sent[0].startswith("a? ")
    assert sent[1].startswith("b? ")


def test_held_out_questions_are_the_demo_test_split():
    rows = [json.loads(line) for line in open("demo/queries.jsonl")]
    questions = held_out_questions()
    assert questions
    assert set(questions) <= {r["text"] for r in rows if r["split"] == "test"}
    assert not set(questions) & {r["text"] for r in rows if r["split"] != "test"}


def test_percentiles_are_nearest_rank():
    values = list(range(1, 101))
    assert _percentile(values, 50) in (50, 51)
    assert _percentile(values, 99) == 99
    assert _percentile([7.0], 95) == 7.0


@pytest.mark.django_db(transaction=True)
def test_the_client_loop_counts_refused_requests_as_errors_by_status(live_server):
    # No router is trained in the test database: every chat request is a clean 503.
    run = asyncio.run(_drive(live_server.url, ["hello?"], concurrency=2, duration=0.3, model="auto", run="t", min_requests=3))
    assert run["latencies"] == []
    assert set(run["errors"]) == {"503"}
    assert sum(run["errors"].values()) >= 3


def test_bad_parameters_are_refused_before_anything_starts():
    with pytest.raises(ValueError, match="concurrency"):
        bench_serving(concurrency=0)
    with pytest.raises(ValueError, match="models"):
        bench_serving(models=[" "])


def test_each_model_is_measured_in_turn_and_the_fast_tiers_ratio_reported(tmp_path, monkeypatch):
    from evaluation import bench_serving as bench

    calls = []

    def fake_run(backend, folder, concurrency, duration, warmup, workers, model, *rest):
        calls.append((backend, model))
        rps = {"auto": 100.0, "auto:fast": 150.0}[model]
        return {"rps": rps, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "errors": 0, "encoder_rps_single": 1.0, "encoder_rps_batched": 2.0,
                "cpu_ms_per_request": {}, "encoder_texts_per_request": 1.0 if model == "auto" else 0.0, "targets": {}}

    monkeypatch.setattr(bench, "prepare_demo", lambda *a, **k: 0.0)
    monkeypatch.setattr(bench, "_bench_backend", fake_run)
    report = bench.bench_serving(var_dir=str(tmp_path), backends=["torch"], models=["auto", "auto:fast"], say=lambda _: None)
    assert calls == [("torch", "auto"), ("torch", "auto:fast")]
    assert report["rps"] == 100.0  # the top level is the first model's
    assert set(report["by_model"]) == {"auto", "auto:fast"}
    assert report["by_model"]["auto:fast"]["encoder_texts_per_request"] == 0.0
    assert report["fast_tier_rps_ratio"] == 1.5


def test_a_backend_of_another_embedding_space_serves_a_demo_of_its_own(tmp_path, monkeypatch):
    from evaluation import bench_serving as bench

    prepared, served = [], []

    def fake_run(backend, folder, *rest):
        served.append((backend, folder))
        rps = {"onnx-int8": 300.0, "onnx": 200.0, "torch": 120.0}[backend]
        return {"rps": rps, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0, "errors": 0, "encoder_rps_single": 1.0, "encoder_rps_batched": 2.0,
                "cpu_ms_per_request": {}, "encoder_texts_per_request": 1.0, "targets": {}}

    monkeypatch.setattr(bench, "prepare_demo", lambda folder, say, deployment=None, backend=None: prepared.append((folder, backend)) or 0.0)
    monkeypatch.setattr(bench, "_bench_backend", fake_run)
    report = bench.bench_serving(var_dir=str(tmp_path), backends=["onnx-int8", "onnx", "torch"], say=lambda _: None)
    # onnx keeps torch's space and shares its demo; int8's vectors differ, so its demo is embedded and trained apart.
    assert served == [("onnx-int8", tmp_path / "space-onnx-int8"), ("onnx", tmp_path), ("torch", tmp_path)]
    assert prepared == [(tmp_path / "space-onnx-int8", "onnx-int8"), (tmp_path, "onnx"), (tmp_path, "torch")]
    assert report["by_backend"]["onnx-int8"]["embedding_space"].endswith("+onnx-int8")
    assert report["by_backend"]["onnx"]["embedding_space"] == report["by_backend"]["torch"]["embedding_space"]
    assert report["targets"]["rps >= 2 x torch's rps"] is True
    with pytest.raises(ValueError, match="one embedding space per run"):
        bench.bench_serving(var_dir=str(tmp_path), backends=["onnx-int8", "torch"], database_url="postgresql://x/y", say=lambda _: None)


@pytest.mark.slow
def test_a_short_real_run_reports_the_figures(tmp_path):
    report = bench_serving(concurrency=4, duration=5, warmup=1, var_dir=str(tmp_path), encoder_seconds=2, say=lambda _: None)
    for name in ("rps", "p50_ms", "p95_ms", "p99_ms", "errors", "encoder_rps_single", "encoder_rps_batched"):
        assert name in report
    assert report["errors"] == 0
    assert report["rps"] > 0
    runs = report["encoder_runs"]
    assert report["encoder_rps_batched"] == round((runs["before"]["encoder_rps_batched"] + runs["after"]["encoder_rps_batched"]) / 2, 1)
    assert report["p50_ms"] <= report["p99_ms"]
    assert set(report["stage_p50_ms"]) >= {"embed_ms", "route_ms", "retrieve_ms", "generate_ms"}
    assert report["encoder_texts_per_request"] == pytest.approx(1.0, abs=0.05)  # questions only: sentences came with the index
    assert report["cpu_ms_per_request"]["web server"] > 0
    assert report["cpu_ms_per_request"]["encoder child"] > 0
    assert report["backend"] in report["by_backend"]
    assert "torch" in report["by_backend"]  # the float32 baseline, measured in the same run
    assert all(run["errors"] == 0 for run in report["by_backend"].values())


def test_the_lean_client_reads_length_and_chunked_bodies_and_keeps_the_connection():
    from evaluation.bench_serving import HttpConnection

    connections = 0

    async def serve(reader, writer):
        nonlocal connections
        connections += 1
        for reply in (b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
                      b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"b\r\n4\r\n\":2}\r\n0\r\n\r\n"):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            assert b'"q"' in await reader.readexactly(length)
            writer.write(reply)
            await writer.drain()
        writer.close()

    async def main():
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        http = HttpConnection(f"http://127.0.0.1:{port}")
        try:
            first = await http.post("/x", {"q": 1})
            second = await http.post("/x", {"q": 2})
        finally:
            await http.close()
            server.close()
        return first, second

    first, second = asyncio.run(main())
    assert first == (200, b'{"a":1}')
    assert second == (503, b'{"b":2}')
    assert connections == 1  # both requests on one keep-alive connection


def test_miss_rates_are_computed_between_two_scrapes():
    from evaluation.bench_serving import miss_rate

    before = {"chunk_sentences": {"hit": 10.0, "miss": 5.0}}
    after = {"chunk_sentences": {"hit": 28.0, "miss": 7.0}}
    assert miss_rate(before, after, "chunk_sentences") == 0.1
    assert miss_rate(after, after, "chunk_sentences") is None


def test_cpu_is_read_per_process_of_the_tree():
    import os
    import signal
    import subprocess
    import sys
    import time

    from evaluation.bench_serving import cpu_ms_per_request, process_tree_cpu

    busy = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    parent = subprocess.Popen([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {busy!r}])"],
                              start_new_session=True)
    try:
        time.sleep(2.0)
        tree = process_tree_cpu(parent.pid)
        assert len(tree) == 2  # the root and its child
        assert f"{parent.pid} web server" in tree
        child = next(key for key in tree if not key.startswith(f"{parent.pid} "))
        assert tree[child] >= 0.25  # the busy child's CPU, not the sleeping parent's
        assert cpu_ms_per_request({child: 0.0}, {child: 1.0}, 10) == {child.split(" ", 1)[1]: 100.0}
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_cpu_of_several_web_workers_and_their_encoder_children_is_added_up_by_role(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from evaluation.bench_serving import cpu_ms_per_request, process_tree_cpu

    # uvicorn --workers 2 in miniature: a supervisor whose multiprocessing-spawned workers each spawn a busy child.
    script = """
import multiprocessing as mp, time
def encoder():
    t = time.process_time()
    while time.process_time() - t < 0.3: pass
    time.sleep(30)
def worker():
    mp.get_context("spawn").Process(target=encoder).start(); time.sleep(30)
if __name__ == "__main__":
    for _ in range(2): mp.get_context("spawn").Process(target=worker).start()
    time.sleep(30)
"""
    (tmp_path / "supervisor.py").write_text(script)  # spawn re-imports the main module: it must be a file
    parent = subprocess.Popen([sys.executable, str(tmp_path / "supervisor.py")], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            tree = process_tree_cpu(parent.pid)
            if sum(key.endswith(" encoder child") for key in tree) == 2 and all(
                    v >= 0.25 for k, v in tree.items() if k.endswith(" encoder child")):
                break
            time.sleep(0.5)
        roles = sorted(key.split(" ", 1)[1] for key in tree if not key.endswith("resource tracker"))
        assert roles == ["encoder child", "encoder child", "web server", "web server", "web supervisor"]
        per_request = cpu_ms_per_request({}, tree, 1)
        assert per_request["encoder child"] >= 500  # both busy children, added up (0.3 s each)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()


def test_a_scaled_out_bench_runs_the_demo_and_the_servers_on_the_shared_database_and_redis(tmp_path, monkeypatch):
    import subprocess

    from evaluation import bench_serving as bench

    seen = []

    def run(argv, **kwargs):
        seen.append(kwargs["env"])
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(bench.subprocess, "run", run)
    deployment = bench.deployment_env("postgresql://u@db/sb", "redis://cache:6379/7")
    assert deployment == {"DATABASE_URL": "postgresql://u@db/sb", "REDIS_URL": "redis://cache:6379/7"}
    bench.prepare_demo(tmp_path, lambda _: None, deployment)
    assert [e["DATABASE_URL"] for e in seen] == ["postgresql://u@db/sb"] * 2  # migrate and load_demo
    assert all(e["REDIS_URL"] == "redis://cache:6379/7" for e in seen)
    server = bench.Server(tmp_path, 1, workers=2, env=deployment)
    assert server.extra_env["DATABASE_URL"] == "postgresql://u@db/sb"
    assert bench.deployment_env() == {}  # by default everything lives in the bench's own folder
