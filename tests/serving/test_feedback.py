"""``POST /api/v1/feedback``: a verdict on a response id, idempotent, 404 for ids never answered, clean 400s."""

from __future__ import annotations

import json

import pytest

from routing.models import Feedback
from tests.support.serving import chat


def feedback(client, **body):
    return client.post("/api/v1/feedback", data=json.dumps(body), content_type="application/json")


@pytest.fixture
def response_id(serving, client):
    return chat(client, "how do I renew my licence").json()["id"]


def test_a_thumbs_up_is_stored_with_the_expert_that_answered(client, response_id):
    response = feedback(client, response_id=response_id, rating="up")
    assert response.status_code == 201
    assert response.json() == {"response_id": response_id, "rating": "up", "comment": "", "expert": "dmv", "suggested_expert": None, "updated": False}
    row = Feedback.objects.get()
    assert (row.request_id, row.rating, row.expert) == (response_id, 1, "dmv")


def test_posting_again_updates_the_same_row(client, response_id):
    feedback(client, response_id=response_id, rating=1)
    response = feedback(client, response_id=response_id, rating=-1, comment="  wrong agency  ")
    assert response.status_code == 200
    assert response.json()["updated"] is True
    row = Feedback.objects.get()
    assert (row.rating, row.comment) == (-1, "wrong agency")


def test_a_response_still_in_the_event_buffer_is_found(serving, client, settings):
    settings.EVENTS_SYNC = False  # events are written by the background writer, in batches
    settings.EVENTS_FLUSH_MS = 60_000
    response_id = chat(client, "how do I renew my licence").json()["id"]
    assert feedback(client, response_id=response_id, rating="down").status_code == 201


def test_an_unknown_response_id_is_404(db, client):
    response = feedback(client, response_id="chatcmpl-nope", rating="up")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "type": "not_found_error", "message": "no response with id 'chatcmpl-nope'", "param": "response_id", "code": "response_not_found",
    }


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"rating": "up"}, "response_id"),
        ({"response_id": "ID", "rating": "sideways"}, "rating must be"),
        ({"response_id": "ID", "rating": 2}, "rating must be"),
        ({"response_id": "ID", "rating": True}, "rating must be"),
        ({"response_id": "ID"}, "rating"),
        ({"response_id": "ID", "rating": "up", "comment": "x" * 2001}, "2000"),
    ],
)
def test_bad_feedback_is_400(client, response_id, body, fragment):
    body = {k: response_id if v == "ID" else v for k, v in body.items()}
    response = feedback(client, **body)
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    assert not Feedback.objects.exists()


def test_a_wrong_expert_report_names_the_right_one_and_an_unknown_expert_is_a_400(client, response_id):
    bad = feedback(client, response_id=response_id, rating="up", suggested_expert="nosuch")
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "suggested_expert"
    assert not Feedback.objects.exists()
    response = feedback(client, response_id=response_id, rating="up", suggested_expert="ssa")
    assert response.status_code == 201
    assert (response.json()["rating"], response.json()["suggested_expert"]) == ("down", "ssa")  # a wrong expert is a thumbs-down
