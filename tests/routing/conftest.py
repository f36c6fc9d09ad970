"""Fixtures of the experiments, schedules and alarms tests: staff, experts with versions, router versions."""

from __future__ import annotations

import pytest

from experts.models import ExpertVersion
from routing.models import RouterVersion
from tests.factories import make_expert

PASSWORD = "correct horse battery staple"


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)


@pytest.fixture
def expert(db, settings):
    """An expert with an active v1 and a candidate v2 that differ in their prompt (served by a language model:
    under the default extractive generator a prompt experiment is refused, see test_experiment_generator)."""
    settings.GENERATOR = "transformers"
    e = make_expert("dmv", "Motor Vehicles", public=False)
    ExpertVersion.objects.create(expert=e, version=1, status="active", system_prompt="v1")
    ExpertVersion.objects.create(expert=e, version=2, status="candidate", system_prompt="v2")
    return e


@pytest.fixture
def lonely_expert(db):
    e = make_expert("ssa", "Social Security", public=False)
    ExpertVersion.objects.create(expert=e, version=1, status="active")
    return e


@pytest.fixture
def routers(db):
    return [
        RouterVersion.objects.create(version=n, path=f"/nowhere/v{n}", experts=["dmv", "ssa"], embedding_model="m", data_fingerprint=str(n), is_active=n == 1)
        for n in (1, 2)
    ]


@pytest.fixture
def admin_client(client, staff):
    """The test client signed in as ``staff``."""
    client.login(username=staff.username, password=PASSWORD)
    return client
