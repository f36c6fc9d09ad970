"""API keys at rest: only a hash is stored, the secret is shown once, revoked keys stop working."""

from __future__ import annotations

import hashlib
from datetime import timedelta

import pytest
from django.utils import timezone

from clients.models import ApiKey
from clients.services import InvalidApiKey, authenticate, create_key, revoke_key
from tests.factories import make_key

pytestmark = pytest.mark.django_db


def test_it_stores_only_the_sha256_of_the_key_never_the_secret(owner):
    created = create_key("chat front end", scopes=["ssa", "va"], created_by=owner)
    secret = created.secret
    assert secret.startswith("sk-sb-")
    assert len(secret) >= 40
    row = ApiKey.objects.values().get(pk=created.key.pk)
    assert row["key_hash"] == hashlib.sha256(secret.encode()).hexdigest()
    assert all(secret not in str(value) for value in row.values())
    assert row["prefix"] == secret[:12]
    assert row["scopes"] == ["ssa", "va"]


def test_two_keys_never_share_a_secret():
    assert make_key("a").secret != make_key("b").secret


def test_it_authenticates_the_right_key():
    created = make_key("client")
    make_key("other")
    assert authenticate(created.secret).pk == created.key.pk


@pytest.mark.parametrize("secret", ["sk-sb-unknown", "sk-proj-openai-style", "", "sk-sb-" + "x" * 500])
def test_it_rejects_unknown_or_malformed_keys(secret):
    with pytest.raises(InvalidApiKey):
        authenticate(secret)


def test_a_revoked_key_is_rejected_and_revoking_twice_keeps_the_first_time():
    created = make_key("client")
    first = revoke_key(created.key).revoked_at
    assert first is not None
    assert revoke_key(created.key).revoked_at == first
    with pytest.raises(InvalidApiKey, match="revoked"):
        authenticate(created.secret)


def test_last_used_is_written_once_per_resolution_not_on_every_request(settings, django_assert_num_queries):
    settings.KEY_LAST_USED_RESOLUTION_S = 60
    created = make_key("client")
    with django_assert_num_queries(2):  # the lookup and the first last_used_at update
        authenticate(created.secret)
    with django_assert_num_queries(1):  # the lookup only
        authenticate(created.secret)
    ApiKey.objects.filter(pk=created.key.pk).update(last_used_at=timezone.now() - timedelta(minutes=5))
    with django_assert_num_queries(2):
        key = authenticate(created.secret)
    assert timezone.now() - key.last_used_at < timedelta(seconds=5)


@pytest.mark.parametrize(("name", "rate"), [("", 10), ("x" * 101, 10), ("ok", -1)])
def test_it_refuses_bad_key_parameters(name, rate):
    with pytest.raises(ValueError, match=r"name|negative"):
        make_key(name, rate_limit_per_minute=rate)
    assert not ApiKey.objects.exists()
