"""``/api/v1/experts/{slug}/adapter[/register]``: staff load an expert's active adapter into the running vLLM."""

from __future__ import annotations

import json

import httpx
import pytest
from rest_framework.test import APIClient

from experts.breaker import breaker_for
from experts.generation.vllm import VllmGenerator
from experts.models import ExpertVersion
from tests.factories import make_expert
from tests.support.vllm import FakeVllm, recorded, replay

pytestmark = pytest.mark.django_db
REGISTER = "/api/v1/experts/dmv/adapter/register"


def fake_vllm(monkeypatch, *responses) -> FakeVllm:
    """Every VllmGenerator the view builds talks to a FakeVllm answering with ``responses``."""
    server = FakeVllm(*responses)
    monkeypatch.setattr("experts.api.views.VllmGenerator", lambda **kw: VllmGenerator("http://vllm.test", transport=server.transport(), sleep=lambda s: None, **kw))
    return server


@pytest.fixture
def dmv(tmp_path, base) -> ExpertVersion:
    folder = tmp_path / "dmv-v2"
    folder.mkdir()
    (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": str(base)}))
    expert = make_expert("dmv", "DMV", public=False)
    return ExpertVersion.objects.create(expert=expert, version=2, status="active", adapter_path=str(folder), base_model=str(base))


@pytest.fixture
def staff(django_user_model) -> APIClient:
    user = django_user_model.objects.create_user("ops", "ops@example.com", "pw", is_staff=True)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_staff_register_the_active_adapter_with_vllm(monkeypatch, dmv, staff):
    fake = fake_vllm(monkeypatch, replay("load_lora_adapter"))
    response = staff.post(REGISTER)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "expert": "dmv", "version": 2, "adapter": "dmv-v2", "path": dmv.adapter_path,
        "base_model": dmv.base_model, "registered": True, "vllm_url": "http://vllm.test",
    }
    assert fake.requests[0].url.path == "/v1/load_lora_adapter"
    assert json.loads(fake.requests[0].content) == {"lora_name": "dmv-v2", "lora_path": dmv.adapter_path}


def test_registering_again_says_it_was_already_loaded(monkeypatch, dmv, staff):
    fake_vllm(monkeypatch, replay("load_lora_adapter_again"))
    response = staff.post(REGISTER)
    assert response.status_code == 200
    assert response.json()["registered"] is False


def test_a_signed_in_user_who_is_not_staff_is_refused(monkeypatch, dmv, django_user_model):
    fake = fake_vllm(monkeypatch)
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("member", "m@example.com", "pw"))
    response = client.post(REGISTER)
    assert response.status_code == 403
    assert response.json()["error"]["type"] == "permission_error"
    assert fake.requests == []


def test_anonymous_callers_are_refused(dmv):
    assert APIClient().post(REGISTER).status_code in (401, 403)


def test_an_unknown_expert_is_404(staff, base):
    response = staff.post("/api/v1/experts/nope/adapter/register")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_an_expert_without_an_adapter_is_409(monkeypatch, staff, base):
    fake = fake_vllm(monkeypatch)
    make_expert("dmv", "DMV", public=False)
    response = staff.post(REGISTER)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "no_adapter"
    assert "train one and activate it" in response.json()["error"]["message"]
    assert fake.requests == []


def test_a_missing_adapter_folder_is_409(monkeypatch, dmv, staff):
    fake_vllm(monkeypatch)
    dmv.adapter_path = "/nonexistent/dmv-v2"
    dmv.save()
    response = staff.post(REGISTER)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "adapter_missing"


def test_an_adapter_trained_on_another_base_model_is_409(monkeypatch, dmv, staff, tmp_path):
    fake_vllm(monkeypatch)
    dmv.base_model = str(tmp_path)
    dmv.save()
    response = staff.post(REGISTER)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "base_model_mismatch"


def test_vllm_down_is_503_with_the_reason(monkeypatch, dmv, staff):
    refused = httpx.ConnectError("[Errno 111] Connection refused")
    fake_vllm(monkeypatch, refused, refused, refused)
    response = staff.post(REGISTER)
    assert response.status_code == 503
    assert response.json()["error"]["type"] == "vllm_unavailable"
    assert "unreachable" in response.json()["error"]["message"]


def test_vllm_refusing_the_adapter_is_502_with_its_message(monkeypatch, dmv, staff):
    fake_vllm(monkeypatch, replay("load_lora_adapter_missing_path"))
    response = staff.post(REGISTER)
    assert response.status_code == 502
    assert response.json()["error"]["type"] == "vllm_error"
    assert "adapter 'dmv-v2'" in response.json()["error"]["message"]


def test_status_shows_whether_vllm_serves_the_adapter_and_the_breaker(monkeypatch, dmv, staff):
    models = recorded("models")["response"]["json"]
    models["data"].append({**next(m for m in models["data"] if m.get("parent")), "id": "dmv-v2"})
    fake_vllm(monkeypatch, replay("health"), httpx.Response(200, json=models))
    breaker_for("dmv").reset()
    breaker_for("dmv").record_failure("generator_timeout")
    response = staff.get("/api/v1/experts/dmv/adapter")
    assert response.status_code == 200
    body = response.json()
    assert body["adapter"]["adapter"] == "dmv-v2"
    assert body["loaded"] is True
    assert body["vllm"]["ok"] is True
    assert body["breaker"]["failures"] == 1
    assert body["breaker"]["last_error"] == "generator_timeout"
    breaker_for("dmv").reset()


def test_status_with_vllm_down_says_loaded_is_unknown(monkeypatch, dmv, staff):
    fake_vllm(monkeypatch, httpx.ConnectError("refused"))
    body = staff.get("/api/v1/experts/dmv/adapter").json()
    assert body["loaded"] is None
    assert body["vllm"]["ok"] is False
