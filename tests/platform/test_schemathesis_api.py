"""Schemathesis against the OpenAPI schema (/api/schema/), in-process through the WSGI app: no request may end in a 5xx.

The platform is set up so that every operation can succeed: a signed-in staff user (HTTP basic
auth), a hand-made router over three experts (the fixtures of tests/routing/test_failover.py) and
a small embedded store; uploads are parsed and indexed for real with a hashing encoder. The
full run sends at least 1,000 generated requests (``-m slow``); the default suite sends a sample.
"""

from __future__ import annotations

import base64
import math
from collections import Counter

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable

from knowledge.stores import get_store
from tests.support.hashing_encoder import use_encoder

PASSWORD = "schemathesis-password-1"


@pytest.fixture
def api(serving, settings, tmp_path, monkeypatch, fake_encoder):
    settings.QDRANT_URL = ""
    settings.QDRANT_PATH = str(tmp_path / "qdrant")
    settings.CHAT_API_REQUIRE_AUTH = True
    settings.RATE_LIMIT_ENABLED = False
    get_store.cache_clear()
    use_encoder(monkeypatch, fake_encoder)
    User.objects.create_user("fuzz", password=PASSWORD, is_staff=True)
    token = base64.b64encode(f"fuzz:{PASSWORD}".encode()).decode()
    schema = schemathesis.openapi.from_wsgi("/api/schema/", get_wsgi_application())
    yield schema, {"Authorization": f"Basic {token}"}
    get_store.cache_clear()


def _fuzz(schema, headers, total: int) -> tuple[Counter, list[str]]:
    operations = [result.ok() for result in schema.get_all_operations()]
    per_operation = max(1, math.ceil(total / len(operations)))
    statuses: Counter = Counter()
    server_errors: list[str] = []
    for operation in operations:
        @settings(max_examples=per_operation, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(case=operation.as_strategy())
        def call(case):
            response = case.call(headers=headers)
            statuses[response.status_code] += 1
            if response.status_code >= 500:
                server_errors.append(f"{case.method} {case.formatted_path} -> {response.status_code}: {response.text[:300]}")

        try:
            call()
        except Unsatisfiable:
            pass
    return statuses, server_errors


def test_a_sample_of_generated_requests_gets_no_server_error(api, db):
    schema, headers = api
    statuses, server_errors = _fuzz(schema, headers, total=60)
    assert sum(statuses.values()) >= 30
    assert not server_errors, "\n".join(server_errors[:20])


@pytest.mark.slow
def test_a_thousand_generated_requests_get_no_server_error(api, db, capsys):
    schema, headers = api
    statuses, server_errors = _fuzz(schema, headers, total=1100)
    with capsys.disabled():
        print(f"\nschemathesis: {sum(statuses.values())} requests, statuses {dict(sorted(statuses.items()))}, 5xx: {len(server_errors)}")
    assert sum(statuses.values()) >= 1000
    assert not server_errors, "\n".join(server_errors[:20])
