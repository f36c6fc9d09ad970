"""Fixtures of the console page tests."""

import pytest


@pytest.fixture
def console(client, owner):
    client.force_login(owner)
    return client
