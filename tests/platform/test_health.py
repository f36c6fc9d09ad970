"""Liveness and readiness probes."""

import pytest

from switchboard import health


def test_healthz_answers_without_touching_dependencies(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_readyz_is_ok_when_every_dependency_answers(client):
    response = client.get("/readyz")
    assert response.status_code == 200, response.content
    assert response.json()["checks"] == {"database": "ok", "broker": "ok", "vector_store": "ok", "embedding_model": "ok"}


@pytest.mark.django_db
def test_readyz_names_the_failing_part_with_503(client, monkeypatch):
    def broken():
        raise ConnectionError("vector store unreachable")

    monkeypatch.setitem(health.CHECKS, "vector_store", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["vector_store"]
    assert "unreachable" in body["checks"]["vector_store"]
    assert body["checks"]["database"] == "ok"


@pytest.mark.django_db
def test_readyz_reports_an_embedding_model_that_is_not_on_disk(client, settings):
    settings.EMBEDDING_MODEL = "/nonexistent/model"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failing"] == ["embedding_model"]
