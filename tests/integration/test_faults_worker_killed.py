"""A worker killed (SIGKILL) half-way through an indexing job: the job is retried, no half-written index is ever active.

The worker is a real subprocess running ``jobs.services.run_job`` around a rebuild of a Qdrant Edge
collection; a fault (``sbcommon.faults``) holds it after it wrote its new snapshot and before
it switches to it, and the test kills it there. The old snapshot must stay active and searchable,
the sweeper must queue the job again (its process on this machine is gone; a worker elsewhere would
wait out the lease), and the second run must finish and switch to a complete index. A real worker
that starts again after such a kill is in tests/integration/test_celery_redis.py.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from knowledge.stores import PointRecord
from knowledge.stores.edge import EdgeQdrantStore

pytestmark = pytest.mark.slow  # four Django start-ups and a migration in subprocesses: ~1-2 min on 2 cores
ROOT = Path(__file__).resolve().parents[2]
DIM = 8

WORKER = textwrap.dedent('''
    import sys
    import django
    django.setup()
    from django.conf import settings
    from jobs import services
    from jobs.models import Job
    from knowledge.stores import PointRecord
    from knowledge.stores.edge import EdgeQdrantStore

    mode, store_path = sys.argv[1], sys.argv[2]
    if mode == "create":
        job = Job.objects.create(kind="index_documents", key="itest:index", title="Index", task_name="knowledge.tasks.index_expert_documents")
        print(job.pk)
    elif mode == "run":
        settings.JOB_HEARTBEAT_S = 1  # beats every second: the sweep below sees a stale one soon after the kill
        def work(job, reporter):
            reporter.progress(0.1, "writing the new snapshot")
            points = [PointRecord(id=f"00000000-0000-0000-0000-{i:012d}", dense=[1.0 if j == i % 8 else 0.0 for j in range(8)],
                                  sparse_indices=[i + 1], sparse_values=[1.0], payload={"text": f"new {i}", "document_id": i})
                      for i in range(5)]
            EdgeQdrantStore(store_path).rebuild("expert_a", 8, points)
            return {"points": len(points)}
        services.run_job(int(sys.argv[3]), work)
    elif mode == "sweep":
        settings.JOB_LEASE_S = 1  # a heartbeat older than a second is a lost worker's
        print(services.sweep())
''')


def _points(marker: str, n: int) -> list[PointRecord]:
    return [PointRecord(id=f"00000000-0000-0000-0000-{i:012d}", dense=[1.0 if j == i % DIM else 0.0 for j in range(DIM)],
                        sparse_indices=[i + 1], sparse_values=[1.0], payload={"text": f"{marker} {i}", "document_id": i}) for i in range(n)]


def _job(db: Path, job_id: int) -> dict:
    with sqlite3.connect(db, timeout=10) as conn:
        conn.row_factory = sqlite3.Row
        return dict(conn.execute("SELECT status, attempts, error, log FROM jobs_job WHERE id = ?", (job_id,)).fetchone())


def _texts(store_path: Path) -> set[str]:
    store = EdgeQdrantStore(store_path)
    hits = store.search("expert_a", [1.0] + [0.0] * (DIM - 1), [1], [1.0], limit=10, method="dense")
    return {h.payload["text"].split()[0] for h in hits}


def test_a_worker_killed_mid_index_leaves_the_old_index_active_and_the_job_is_retried(project_env, migrate, tmp_path):
    migrate(project_env)
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    store_path = tmp_path / "qdrant"
    EdgeQdrantStore(store_path).rebuild("expert_a", DIM, _points("old", 3))
    active_before = (store_path / "expert_a" / "CURRENT").read_text()
    db = Path(project_env["DATABASE_URL"].removeprefix("sqlite:///"))

    def run(*args: str, env: dict[str, str]) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, str(script), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    created = run("create", str(store_path), env=project_env)
    job_id = int(created.communicate(timeout=120)[0].strip().splitlines()[-1])

    faults_file = tmp_path / "faults.json"
    faults_file.write_text(json.dumps({"vector_store_write": {"mode": "slow", "delay_s": 30}}))
    env = {**project_env, "SWITCHBOARD_FAULTS_FILE": str(faults_file)}
    worker = run("run", str(store_path), str(job_id), env=env)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # wait until the new snapshot exists beside the active one
        snapshots = [p for p in (store_path / "expert_a").iterdir() if p.is_dir()]
        if len(snapshots) > 1 and _job(db, job_id)["status"] == "running":
            break
        assert worker.poll() is None, worker.communicate()[0]
        time.sleep(0.2)
    else:
        worker.kill()
        pytest.fail("the worker never reached the point of switching")
    time.sleep(0.5)
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(timeout=10)

    assert (store_path / "expert_a" / "CURRENT").read_text() == active_before  # the half-written snapshot never became active
    assert _texts(store_path) == {"old"}
    assert _job(db, job_id)["status"] == "running"  # the row says what happened: a run that never finished

    time.sleep(2.5)  # past the lease: the dead worker's heartbeat is stale
    swept = run("sweep", str(store_path), env=project_env)
    output = swept.communicate(timeout=120)[0]
    assert "'requeued': 1" in output, output
    row = _job(db, job_id)
    assert row["status"] == "queued"
    assert "worker lost" in row["log"]

    rerun = run("run", str(store_path), str(job_id), env=project_env)  # the next worker picks it up, no fault now
    assert rerun.wait(timeout=180) == 0, rerun.communicate()[0]
    row = _job(db, job_id)
    assert row["status"] == "succeeded", row["error"]
    assert row["attempts"] == 2
    assert _texts(store_path) == {"new"}
    assert len([p for p in (store_path / "expert_a").iterdir() if p.is_dir()]) == 1  # the orphaned snapshot was collected

