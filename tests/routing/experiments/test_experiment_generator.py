"""An adapter or prompt experiment under the extractive generator is refused with the reason (it could only find noise)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from experts.models import ExpertVersion
from routing.experiments import services
from routing.experiments.models import Experiment
from tests.factories import make_expert

from ..conftest import PASSWORD


@pytest.fixture
def prompt_versions(db):
    e = make_expert("va", "Veterans", public=False)
    ExpertVersion.objects.create(expert=e, version=1, status="active", system_prompt="Answer briefly.")
    ExpertVersion.objects.create(expert=e, version=2, status="candidate", system_prompt="Answer in detail.", adapter_path="/adapters/va-v2")
    return e


def test_it_refuses_an_adapter_or_prompt_experiment_under_the_extractive_generator(prompt_versions, settings):
    settings.GENERATOR = "extractive"
    with pytest.raises(services.ExperimentError, match="differ in adapter, prompt only") as caught:
        services.create_experiment(kind="expert", expert=prompt_versions, control_version=1, treatment_version=2)
    assert caught.value.param == "treatment_version"
    assert "GENERATOR=transformers or vllm" in str(caught.value)
    assert not Experiment.objects.exists()


def test_the_same_experiment_is_accepted_when_a_language_model_generates(prompt_versions, settings):
    settings.GENERATOR = "transformers"
    experiment = services.create_experiment(kind="expert", expert=prompt_versions, control_version=1, treatment_version=2)
    assert experiment.status == "draft"


def test_router_experiments_do_not_depend_on_the_generator(routers, settings):
    settings.GENERATOR = "extractive"
    assert services.create_experiment(kind="router", control_version=1, treatment_version=2).kind == "router"


def test_the_console_form_shows_the_reason_on_the_treatment_field(client, staff, prompt_versions, settings):
    settings.GENERATOR = "extractive"
    client.login(username=staff.username, password=PASSWORD)
    response = client.post(reverse("console-experiments"), {
        "kind": "expert", "expert": "va", "control_version": 1, "treatment_version": 2, "split": 0.5, "unit": "conversation",
        "primary_metric": "thumbs_up_rate", "design": "sequential", "baseline": 0.6, "min_effect": 0.05, "alpha": 0.05, "power": 0.8,
    })
    assert response.status_code == 400
    assert "never reads a version&#x27;s adapter or prompt" in response.content.decode()
    assert response.context["form"].errors["treatment_version"]
