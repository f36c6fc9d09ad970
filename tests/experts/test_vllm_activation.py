"""Activating a version with GENERATOR=vllm loads its adapter into vLLM first; if that fails, the old version keeps serving."""

from __future__ import annotations

import json

import httpx
import pytest

from experts import services
from experts.generation.vllm import VllmGenerator
from experts.models import ExpertVersion
from tests.factories import make_expert
from tests.support.vllm import FakeVllm, replay

pytestmark = pytest.mark.django_db


@pytest.fixture
def versions(tmp_path, settings) -> tuple[ExpertVersion, ExpertVersion]:
    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    settings.BASE_MODEL = str(base)
    settings.GENERATOR = "vllm"
    expert = make_expert("dmv", "DMV", public=False)
    made = []
    for number, status in ((1, "active"), (2, "candidate")):
        folder = tmp_path / f"dmv-v{number}"
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"r": 8, "base_model_name_or_path": str(base)}))
        made.append(ExpertVersion.objects.create(expert=expert, version=number, status=status, adapter_path=str(folder), base_model=str(base)))
    return made[0], made[1]


def fake_vllm(monkeypatch, *responses) -> list[httpx.Request]:
    server = FakeVllm(*responses)
    monkeypatch.setattr("experts.generation.vllm.VllmGenerator", lambda: VllmGenerator("http://vllm.test", transport=server.transport(), sleep=lambda s: None, retries=0))
    return server.requests


def test_activation_loads_the_adapter_into_vllm_before_switching(monkeypatch, versions):
    v1, v2 = versions
    seen = fake_vllm(monkeypatch, replay("models"), replay("load_lora_adapter"))
    services.activate_version(v2)
    assert [r.url.path for r in seen] == ["/v1/models", "/v1/load_lora_adapter"]
    assert json.loads(seen[1].content) == {"lora_name": "dmv-v2", "lora_path": v2.adapter_path}
    v1.refresh_from_db()
    v2.refresh_from_db()
    assert (v1.status, v2.status) == ("archived", "active")


def test_vllm_down_refuses_the_activation_and_the_previous_version_keeps_serving(monkeypatch, versions):
    v1, v2 = versions
    fake_vllm(monkeypatch, httpx.ConnectError("[Errno 111] Connection refused"))
    with pytest.raises(services.VersionError, match=r"current version keeps serving.*unreachable"):
        services.activate_version(v2)
    v1.refresh_from_db()
    v2.refresh_from_db()
    assert (v1.status, v2.status) == ("active", "candidate")


def test_vllm_refusing_the_adapter_refuses_the_activation(monkeypatch, versions):
    v1, v2 = versions
    fake_vllm(monkeypatch, replay("models"), replay("load_lora_adapter_missing_path"))
    with pytest.raises(services.VersionError, match="could not load the adapter of v2"):
        services.activate_version(v2)
    v1.refresh_from_db()
    assert v1.status == "active"


def test_other_generators_do_not_call_vllm(monkeypatch, versions, settings):
    settings.GENERATOR = "extractive"
    seen = fake_vllm(monkeypatch)
    services.activate_version(versions[1])
    assert seen == []
