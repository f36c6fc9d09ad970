"""A team's journey through the API alone, on a slice of a public dataset: import a raw question log, discover four
departments, review (rename, merge duplicates, move by search), promote, upload each department's documents, train
the router and ask. No call reaches into the product's internals; the time each step took is printed."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth.models import Group
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from experts.ml.extractive import NOT_FOUND

DOC2DIAL = Path(__file__).resolve().parents[2].parent / "shared" / "datasets" / "doc2dial"
PER_DEPARTMENT = 30  # logged questions of each department (first turns of doc2dial's train split)
DOCUMENTS = 6  # documents uploaded to each department
ASKED = 5  # held-out first questions asked of each department
# A floor, not a target: the router trained on 30 reviewed questions a department routed 15 of these 20 in three runs
# here, and a clean-clone run once routed 2 of the first 4 only; routing quality is measured by evaluate router, not here.
ROUTED_FLOOR = 0.55
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.skipif(not DOC2DIAL.exists(), reason="the shared doc2dial dataset is not here")]


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DOC2DIAL / name).read_text().splitlines()]


def succeeded(api: APIClient, response) -> dict:
    """The job a 202 names, once finished (the test's Celery runs it eagerly); fails the test on any other outcome."""
    assert response.status_code == 202, response.content
    job = api.get(response.json()["status_url"]).json()
    assert job["status"] == "succeeded", (job.get("error"), job.get("log", "")[-500:])
    return job


def test_a_team_takes_its_own_log_and_documents_to_routed_answers_by_api_alone(django_user_model, settings, tmp_path):
    settings.ROUTER_DIR = tmp_path / "routers"
    team = Group.objects.create(name="Citizens")
    admin = django_user_model.objects.create_user("lead", "lead@example.com", "pw", is_staff=True)
    admin.groups.add(team)
    api = APIClient()
    api.force_authenticate(admin)
    queries = [q for q in rows("queries.jsonl") if q["split"] == "train" and not q.get("context")]
    log, gold = [], {}
    for department in ("dmv", "ssa", "studentaid", "va"):
        for q in [q for q in queries if q["domain"] == department][:PER_DEPARTMENT]:
            log.append({"text": q["text"]})
            gold[q["text"]] = department
    steps: dict[str, float] = {}
    started = clock = time.monotonic()

    def step(name: str) -> None:
        nonlocal clock
        steps[name] = round(time.monotonic() - clock, 1)
        clock = time.monotonic()

    body = "\n".join(json.dumps(r) for r in log).encode()
    succeeded(api, api.post("/api/v1/queries/import", {"file": SimpleUploadedFile("helpdesk.jsonl", body), "team": "Citizens"}, format="multipart"))
    step("import")
    job = succeeded(api, api.post("/api/v1/discovery/runs", {"n_experts": 4, "team": "Citizens"}, format="json"))
    run_id = job["result"]["run"]
    step("discover")

    # Review: name each proposal for the department most of its questions come from; merge two of the same department.
    def proposals() -> list[dict]:
        return [p for p in api.get(f"/api/v1/discovery/runs/{run_id}").json()["proposals"] if p["status"] == "proposed"]

    def department_of(proposal: dict) -> str:
        texts, page = [], 1
        while True:
            body = api.get(f"/api/v1/discovery/proposals/{proposal['id']}/queries?page={page}").json()
            texts += [q["text"] for q in body["queries"]]
            if page >= body["pages"]:
                return Counter(gold[t] for t in texts).most_common(1)[0][0]
            page += 1

    named: dict[str, int] = {}
    for proposal in proposals():
        department = department_of(proposal)
        if department in named:
            merged = api.post(f"/api/v1/discovery/runs/{run_id}/merge", {"proposals": [named[department], proposal["id"]], "target": named[department]}, format="json")
            assert merged.status_code == 200, merged.content
        else:
            named[department] = proposal["id"]
            renamed = api.post(f"/api/v1/discovery/proposals/{proposal['id']}/rename", {"name": department.upper()}, format="json")
            assert renamed.status_code == 200, renamed.content
    if "va" in named:  # the GI Bill is the VA's, whichever proposal discovery put it in
        moved = api.post(f"/api/v1/discovery/runs/{run_id}/move", {"matching": "GI Bill", "target": named["va"]}, format="json")
        assert moved.status_code in (200, 400), moved.content  # 400: no such question left outside
    finished = api.post(f"/api/v1/discovery/runs/{run_id}/finish", format="json")  # every open proposal becomes an expert, by its name
    assert finished.status_code == 200, finished.content
    step("review and promote")
    served = {m["id"] for m in api.get("/v1/models").json()["data"]} - {"auto", "auto:fast", "auto:accurate"}
    assert served == set(named)  # each promoted department answers as a model named by its slug
    experts = {department: department for department in named}

    documents = rows("docs.jsonl")
    for department, slug in experts.items():
        mine = [d for d in documents if d["domain"] == department][:DOCUMENTS]
        upload = "\n".join(json.dumps({"id": d["doc_id"], "title": d["title"], "text": d["text"]}) for d in mine).encode()
        succeeded(api, api.post(f"/api/v1/experts/{slug}/documents", {"files": [SimpleUploadedFile(f"{slug}.jsonl", upload)]}, format="multipart"))
    step("documents")
    succeeded(api, api.post("/api/v1/router/train", {"activation": "always"}, format="json"))
    versions = api.get("/api/v1/router/versions").json()
    assert versions[0]["is_active"]
    step("train")

    held_out = [q for q in rows("queries.jsonl") if q["split"] == "test" and not q.get("context") and q["domain"] in experts]
    asked = [q for d in experts for q in [q for q in held_out if q["domain"] == d][:ASKED]]
    right = 0
    for q in asked:
        response = api.post("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": q["text"]}]}, format="json")
        assert response.status_code == 200, response.content
        meta = response.json()["switchboard"]
        right += meta["expert"] == experts[q["domain"]]
        # Cited, or an honest "not found" (the extractive generator's own says so with answer_source "extractive").
        said = response.json()["choices"][0]["message"]["content"]
        assert meta["citations"] or meta["answer_source"] in ("not_found", "none") or said == NOT_FOUND, meta
    step("ask")
    print(f"journey: {round(time.monotonic() - started, 1)} s by API alone; steps {steps}; {right} of {len(asked)} held-out questions to their department")
    assert right >= ROUTED_FLOOR * len(asked)


def test_a_team_with_its_departments_documents_first_gets_proposals_that_follow_them(django_user_model, settings, tmp_path):
    settings.ROUTER_DIR = tmp_path / "routers"
    team = Group.objects.create(name="Citizens")
    lead = django_user_model.objects.create_user("lead", "lead@example.com", "pw", is_staff=True)  # finishing a review is staff's
    lead.groups.add(team)
    api = APIClient()
    api.force_authenticate(lead)
    started = time.monotonic()
    documents = rows("docs.jsonl")
    for department in ("dmv", "ssa", "studentaid", "va"):
        made = api.post("/api/v1/experts", {"name": department.upper(), "description": f"The {department} questions", "team": "Citizens"}, format="json")
        assert made.status_code == 201, made.content
        mine = [d for d in documents if d["domain"] == department][:DOCUMENTS]
        upload = "\n".join(json.dumps({"id": d["doc_id"], "title": d["title"], "text": d["text"]}) for d in mine).encode()
        succeeded(api, api.post(made.json()["documents_url"], {"files": [SimpleUploadedFile(f"{department}.jsonl", upload)]}, format="multipart"))
    queries = [q for q in rows("queries.jsonl") if q["split"] == "train" and not q.get("context")]
    log = [q for department in ("dmv", "ssa", "studentaid", "va") for q in [q for q in queries if q["domain"] == department][:PER_DEPARTMENT]]
    body = "\n".join(json.dumps({"text": q["text"]}) for q in log).encode()
    succeeded(api, api.post("/api/v1/queries/import", {"file": SimpleUploadedFile("helpdesk.jsonl", body), "team": "Citizens"}, format="multipart"))

    run_id = succeeded(api, api.post("/api/v1/discovery/runs", {"n_experts": 4, "team": "Citizens"}, format="json"))["result"]["run"]

    proposals = api.get(f"/api/v1/discovery/runs/{run_id}").json()["proposals"]
    assert {p["name"] for p in proposals} == {"DMV", "SSA", "STUDENTAID", "VA"}
    gold = {q["text"]: q["domain"].upper() for q in log}
    right = 0
    for proposal in proposals:
        number, pages = 1, 1
        while number <= pages:
            page = api.get(f"/api/v1/discovery/proposals/{proposal['id']}/queries?page={number}").json()
            right += sum(gold.get(q["text"]) == proposal["name"] for q in page["queries"])
            number, pages = number + 1, page["pages"]
    finished = api.post(f"/api/v1/discovery/runs/{run_id}/finish", format="json")
    assert finished.status_code == 200, finished.content
    served = {m["id"] for m in api.get("/v1/models").json()["data"]} - {"auto", "auto:fast", "auto:accurate"}
    assert served == {"dmv", "ssa", "studentaid", "va"}  # the departments made first, not new experts
    print(f"journey with documents first: {round(time.monotonic() - started, 1)} s; {right} of {len(log)} questions proposed to their department")
    # A floor: 100 of 120 here with six documents a department (with all of them, 0.95 of doc2dial's first turns: labeling.ml.seeding).
    assert right >= 0.7 * len(log)
