"""From `make run RUN_ARGS=--no-demo` to routed answers, by API calls alone, on doc2dial (departments and documents first).

    VAR_DIR=/tmp/j PORT=8011 make run RUN_ARGS=--no-demo &
    .venv/bin/python tools/api_journey.py http://127.0.0.1:8011 /tmp/j/admin-credentials.txt

Waits for /readyz, makes four departments (POST /api/v1/experts), uploads 44 documents to each (~1,500
passages) and imports the train and val questions with their conversations, starts discovery told 4,
finishes the review, trains the router and asks 20 test questions; prints each step's seconds and how many
of the 20 went to their department.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import httpx

DATA = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "doc2dial"
DEPARTMENTS = ("dmv", "ssa", "studentaid", "va")
DOCUMENTS = 44  # a department's documents: ~1,500 passages over the four, the size issue 56 names
ASKED = 20


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DATA / name).read_text().splitlines()]


def main(base: str, credentials: str) -> dict:
    fields = dict(line.split(": ", 1) for line in Path(credentials).read_text().splitlines() if ": " in line)
    session = httpx.Client(auth=(fields["username"], fields["password"]), timeout=120)
    started, steps = time.monotonic(), {}

    def step(name: str) -> None:
        steps[name] = round(time.monotonic() - started - sum(steps.values()), 1)
        print(name, steps[name], flush=True)

    def finished(response: httpx.Response) -> dict:
        assert response.status_code == 202, (response.status_code, response.text[:300])
        while True:
            job = session.get(base + response.json()["status_url"]).json()
            if job["status"] in ("succeeded", "failed", "cancelled"):
                assert job["status"] == "succeeded", job
                return job
            time.sleep(1)

    while True:
        try:
            if session.get(base + "/readyz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        time.sleep(1)
    step("ready")
    documents, questions = rows("docs.jsonl"), rows("queries.jsonl")
    jobs = []
    for department in DEPARTMENTS:
        made = session.post(base + "/api/v1/experts", json={"name": department.upper()})
        assert made.status_code == 201, made.text
        mine = [d for d in documents if d["domain"] == department][:DOCUMENTS]
        body = "\n".join(json.dumps({"id": d["doc_id"], "title": d["title"], "text": d["text"]}) for d in mine).encode()
        jobs.append(session.post(base + made.json()["documents_url"], files={"files": (f"{department}.jsonl", body)}))
    log = [q for q in questions if q["split"] in ("train", "val")]
    body = "\n".join(json.dumps({"text": q["text"], "conversation": q["dial_id"]}) for q in log).encode()
    jobs.append(session.post(base + "/api/v1/queries/import", files={"file": ("log.jsonl", body)}))
    for job in jobs:
        finished(job)
    step("departments, documents and log")
    run = finished(session.post(base + "/api/v1/discovery/runs", json={"n_experts": len(DEPARTMENTS)}))["result"]["run"]
    step("discovery")
    promoted = session.post(base + f"/api/v1/discovery/runs/{run}/finish")
    assert promoted.status_code == 200, promoted.text
    step("promote")
    finished(session.post(base + "/api/v1/router/train", json={"activation": "always"}))
    step("train router")
    right = 0
    for q in [q for q in questions if q["split"] == "test" and not q.get("context")][:ASKED]:
        answered = session.post(base + "/v1/chat/completions", json={"model": "auto", "messages": [{"role": "user", "content": q["text"]}]})
        assert answered.status_code == 200, answered.text
        right += answered.json()["switchboard"]["expert"] == q["domain"]
    step(f"ask {ASKED}")
    return {"total_s": round(time.monotonic() - started, 1), "steps": steps, "documents": DOCUMENTS * len(DEPARTMENTS), "log": len(log),
            "routed_right": f"{right}/{ASKED}"}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
