"""Settings for the test suite: the defaults, with a throw-away data folder and in-process Celery.

Tests that need a real worker or real services start them themselves (tests/integration).
"""

import os
import tempfile

# A throw-away data folder whatever the shell exports: the suite creates and deletes collections, routers and
# adapters by the experts' names, and a shell that ran `VAR_DIR=/srv/switchboard make run` must not lose its
# knowledge bases to `make test` (an exported VAR_DIR was used before, and its collections were wiped).
os.environ["VAR_DIR"] = tempfile.mkdtemp(prefix="switchboard-test-")
os.environ.pop("ADAPTER_DIR", None)  # under VAR_DIR, as by default
os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "1")

from .settings import *  # noqa: F403  (test settings extend the real ones)

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins in tests only
# A test's database is set up and torn down around it: a request thread kept from an earlier test
# would carry that test's connection into the next one. Each request gets a fresh thread here.
REQUEST_THREADS_KEEP = 0
# Unit tests never load the real base model, even when the shell exports BASE_MODEL: the ones that need
# an LM build the tiny random-weight one (tests/experts/conftest.py) and point BASE_MODEL at it.
BASE_MODEL = str(VAR_DIR / "models" / "tiny-lm")  # noqa: F405  (VAR_DIR comes from the real settings)
# The suite answers extractively (fast, no model): the transformers backend is tested with the tiny LM
# where a test asks for it, and the real one only in `slow` tests.
GENERATOR = "extractive"
# Each test asks its own questions: a model answer cached by one test must not answer the next one's
# (the cache is per process). tests/serving/test_answer_cache.py turns it on.
ANSWER_CACHE_SIZE = 0
# Routers train in many tests; the fast tier (a distillation and a second router) is trained only
# where a test asks for it (tests/routing/test_fast_tier.py).
ROUTER_FAST_TIER = False
