"""``/api/v1/discovery/...``: start runs, read them and their proposals, and review them as the console does.

Three callers: ``owner`` (a member of the run's team), a member of another team (``stranger``: every run
and proposal of the team is a 404 to them) and ``staff``.
"""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Group
from rest_framework.test import APIClient

from experts.models import Expert
from jobs.models import Job
from labeling.models import Assignment
from tests.factories import make_expert, make_team

from .conftest import direction, proposal

pytestmark = pytest.mark.django_db


def client_for(user) -> APIClient:
    client = APIClient()
    client.force_authenticate(user)
    return client


@pytest.fixture
def api(owner, team):
    owner.groups.add(team)
    return client_for(owner)


@pytest.fixture
def stranger(django_user_model):
    user = django_user_model.objects.create_user("stranger")
    user.groups.add(Group.objects.create(name="Elsewhere"))
    return client_for(user)


@pytest.fixture
def staff(django_user_model):
    return client_for(django_user_model.objects.create_user("boss", is_staff=True))


def names(body) -> dict[str, str]:
    return {p["name"]: p["status"] for p in body["proposals"]}


def test_it_starts_a_run_with_the_number_of_experts_as_a_job(api, team):
    response = api.post("/api/v1/discovery/runs", {"n_experts": 4, "min_samples": 3}, format="json")

    assert response.status_code == 202
    job = Job.objects.get()
    assert response["Location"] == f"/api/v1/jobs/{job.pk}"
    assert (job.kind, job.params["n_experts"], job.params["min_samples"], job.params["eps"], job.params["team"]) == ("discover", 4, 3, None, team.pk)


def test_a_user_with_no_team_may_not_start_a_run_and_is_told_why(django_user_model):
    response = client_for(django_user_model.objects.create_user("loner")).post("/api/v1/discovery/runs", {}, format="json")

    assert response.status_code == 403
    assert "You belong to no team" in response.json()["error"]["message"]
    assert not Job.objects.exists()


def test_it_rejects_parameters_out_of_range_with_the_fields_errors(api):
    response = api.post("/api/v1/discovery/runs", {"n_experts": 0, "min_samples": 1}, format="json")

    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert "n_experts" in message
    assert "min_samples" in message


def test_it_rejects_a_source_the_team_has_no_queries_from(api, three_topics):
    response = api.post("/api/v1/discovery/runs", {"source": "nowhere"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == "source: none of your teams' queries come from 'nowhere'"
    assert api.post("/api/v1/discovery/runs", {"source": "test"}, format="json").status_code == 202


def test_it_refuses_a_run_for_another_team(api):
    Group.objects.create(name="Others")

    response = api.post("/api/v1/discovery/runs", {"team": "Others"}, format="json")

    assert response.status_code == 403


def test_it_lists_and_shows_the_teams_runs_with_their_proposals(api, three_topics):
    listed = api.get("/api/v1/discovery/runs").json()
    detail = api.get(f"/api/v1/discovery/runs/{three_topics.pk}").json()

    assert [r["id"] for r in listed] == [three_topics.pk]
    assert (detail["status"], detail["team"], detail["unassigned"]) == ("draft", "Reviewers", 2)
    assert names(detail) == {"Licences": "proposed", "Passports": "proposed", "Pensions": "proposed"}


def test_another_teams_run_and_proposal_are_not_found_for_every_read_and_write(stranger, three_topics):
    licences = proposal(three_topics, "Licences")
    run_urls = ["", "/unassigned", "/merge", "/move", "/detach-noise", "/attach-noise", "/undo", "/finish", "/discard"]
    proposal_urls = ["", "/queries", "/rename", "/split", "/discard", "/promote"]

    statuses = {stranger.get(f"/api/v1/discovery/runs/{three_topics.pk}{u}").status_code for u in run_urls[:2]}
    statuses |= {stranger.post(f"/api/v1/discovery/runs/{three_topics.pk}{u}", {}, format="json").status_code for u in run_urls[2:]}
    statuses |= {stranger.get(f"/api/v1/discovery/proposals/{licences.pk}{u}").status_code for u in proposal_urls[:2]}
    statuses |= {stranger.post(f"/api/v1/discovery/proposals/{licences.pk}{u}", {"name": "x", "k": 2}, format="json").status_code
                 for u in proposal_urls[2:]}

    assert statuses == {404}
    assert stranger.get("/api/v1/discovery/runs").json() == []
    assert proposal(three_topics, "Licences").name == "Licences"


def test_it_renames_a_proposal_and_answers_with_the_run(api, three_topics):
    licences = proposal(three_topics, "Licences")

    response = api.post(f"/api/v1/discovery/proposals/{licences.pk}/rename", {"name": "  Driving   licences "}, format="json")

    assert response.status_code == 200
    assert response.json()["notice"] == "Renamed to 'Driving licences'."
    assert names(response.json()["run"])["Driving licences"] == "proposed"
    assert response.json()["run"]["actions"][0]["action"] == "rename"


def test_a_rename_without_a_name_is_a_400_with_the_field(api, three_topics):
    response = api.post(f"/api/v1/discovery/proposals/{proposal(three_topics, 'Licences').pk}/rename", {}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("name")


def test_it_merges_by_id_into_the_target_and_a_single_proposal_is_a_400(api, three_topics):
    p, q = proposal(three_topics, "Passports"), proposal(three_topics, "Pensions")

    merged = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/merge", {"proposals": [p.pk, q.pk], "target": q.pk}, format="json")
    alone = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/merge", {"proposals": [p.pk]}, format="json")

    assert merged.status_code == 200
    assert names(merged.json()["run"])["Passports"] == "merged"
    assert proposal(three_topics, "Pensions").size == 6
    assert alone.status_code == 400


def test_it_moves_queries_to_another_proposal_and_refuses_a_target_of_another_run(api, three_topics, make_run):
    licences, passports = proposal(three_topics, "Licences"), proposal(three_topics, "Passports")
    moving = list(Assignment.objects.filter(proposal=licences).values_list("query_id", flat=True)[:2])
    other = make_run({"Elsewhere": (3, [f"elsewhere {i}" for i in range(2)])}).proposals.get()

    moved = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/move", {"queries": moving, "target": passports.pk}, format="json")
    refused = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/move", {"queries": moving, "target": other.pk}, format="json")
    empty = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/move", {"queries": [], "target": None}, format="json")

    assert moved.status_code == 200
    assert moved.json()["notice"] == "Moved 2 queries."
    assert proposal(three_topics, "Passports").size == 6
    assert (refused.status_code, empty.status_code) == (400, 400)


def test_it_moves_every_query_holding_some_words_in_one_call(api, three_topics):
    licences, passports = proposal(three_topics, "Licences"), proposal(three_topics, "Passports")
    url = f"/api/v1/discovery/runs/{three_topics.pk}/move"

    moved = api.post(url, {"matching": "driving 3", "source": licences.pk, "target": passports.pk}, format="json")
    nothing = api.post(url, {"matching": "weather forecast", "target": passports.pk}, format="json")
    both = api.post(url, {"matching": "driving", "queries": [1], "target": None}, format="json")
    neither = api.post(url, {"target": None}, format="json")

    assert moved.status_code == 200, moved.content
    assert moved.json()["notice"] == "Moved 1 queries matching 'driving 3'."
    assert "renew my driving licence 3" in Assignment.objects.filter(proposal=passports).values_list("query__text", flat=True)
    assert (nothing.status_code, both.status_code, neither.status_code) == (400, 400, 400)
    assert "weather forecast" in nothing.content.decode()


def test_it_splits_a_proposal_by_its_own_queries(api, make_run):
    run = make_run({"Mixed": (0, {0: [f"licence renewal {i}" for i in range(4)], 1: [f"licence theft {i}" for i in range(4)]})})

    response = api.post(f"/api/v1/discovery/proposals/{proposal(run, 'Mixed').pk}/split", {"k": 2}, format="json")
    too_many = api.post(f"/api/v1/discovery/proposals/{proposal(run, 'Mixed').pk}/split", {"k": 50}, format="json")

    assert response.status_code == 200
    statuses = sorted(names(response.json()["run"]).values())
    assert statuses == ["proposed", "proposed", "split"]
    assert too_many.status_code == 400


def test_discard_then_undo_and_a_second_discard_of_a_discarded_proposal_is_a_conflict(api, three_topics):
    pensions = proposal(three_topics, "Pensions")
    url = f"/api/v1/discovery/proposals/{pensions.pk}/discard"

    first = api.post(url)
    again = api.post(url)
    undone = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/undo")

    assert first.status_code == 200
    assert again.status_code == 409
    assert undone.json()["notice"] == "Undid: Discarded 'Pensions'."
    assert proposal(three_topics, "Pensions").status == "proposed"


def test_it_detaches_and_attaches_noise(api, make_run):
    run = make_run({"Licences": (0, [f"licence {i}" for i in range(4)])}, noise={"near": direction([0, 5]), "far": direction(9)}, noise_in="Licences")

    detached = api.post(f"/api/v1/discovery/runs/{run.pk}/detach-noise")
    attached = api.post(f"/api/v1/discovery/runs/{run.pk}/attach-noise", {"max_distance": 0.4}, format="json")
    bad = api.post(f"/api/v1/discovery/runs/{run.pk}/attach-noise", {"max_distance": 5}, format="json")

    assert detached.json()["notice"] == "Detached 2 noise queries."
    assert attached.json()["notice"] == "Attached 1 queries."
    assert attached.json()["run"]["unassigned"] == 1
    assert bad.status_code == 400


def test_it_promotes_a_proposal_into_the_runs_team(api, three_topics, team):
    licences = proposal(three_topics, "Licences")

    response = api.post(f"/api/v1/discovery/proposals/{licences.pk}/promote", {"name": "Licences desk", "seed_queries": ["renew my driving licence 0"]},
                        format="json")

    assert response.status_code == 200
    expert = Expert.objects.get(slug="licences-desk")
    assert expert.team == team
    assert proposal(three_topics, "Licences desk").seed_queries == ["renew my driving licence 0"]


def test_a_member_may_not_promote_over_another_teams_expert(api, three_topics):
    make_expert("theirs", "Theirs", team=make_team("Others"), public=False)

    response = api.post(f"/api/v1/discovery/proposals/{proposal(three_topics, 'Licences').pk}/promote", {"name": "Theirs"}, format="json")

    assert response.status_code == 403
    assert proposal(three_topics, "Licences").status == "proposed"


def test_finishing_is_for_staff_and_promoting_a_promoted_run_is_a_conflict(api, staff, three_topics):
    url = f"/api/v1/discovery/runs/{three_topics.pk}/finish"

    by_member = api.post(url)
    finished = staff.post(url)
    again = staff.post(url)
    rename = api.post(f"/api/v1/discovery/proposals/{proposal(three_topics, 'Licences').pk}/rename", {"name": "Late"}, format="json")

    assert by_member.status_code == 403
    assert finished.status_code == 200
    assert finished.json()["run"]["status"] == "promoted"
    assert set(names(finished.json()["run"]).values()) == {"promoted"}
    assert (again.status_code, rename.status_code) == (409, 409)


def test_it_pages_a_proposals_queries_and_the_unassigned_ones(api, three_topics):
    queries = api.get(f"/api/v1/discovery/proposals/{proposal(three_topics, 'Pensions').pk}/queries").json()
    unassigned = api.get(f"/api/v1/discovery/runs/{three_topics.pk}/unassigned").json()

    assert (queries["count"], sorted(q["text"] for q in queries["queries"])) == (2, ["state pension age 0", "state pension age 1"])
    assert sorted(q["text"] for q in unassigned["queries"]) == ["close to licences", "far from everything"]


def test_it_discards_a_run_in_review_and_a_promoted_run_is_a_conflict(api, staff, three_topics, make_run):
    promoted = make_run({"Done": (4, [f"done {i}" for i in range(2)])})
    staff.post(f"/api/v1/discovery/runs/{promoted.pk}/finish")

    discarded = api.post(f"/api/v1/discovery/runs/{three_topics.pk}/discard")
    refused = api.post(f"/api/v1/discovery/runs/{promoted.pk}/discard")

    assert (discarded.status_code, discarded.json()["run"]["status"]) == (200, "discarded")
    assert [r["id"] for r in api.get("/api/v1/discovery/runs").json()] == [promoted.pk]
    assert refused.status_code == 409
