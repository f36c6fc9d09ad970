"""Fixtures of the console page tests."""

import pytest

from tests.factories import make_expert


@pytest.fixture
def experts():
    """Two active experts (dmv, ssa) and a disabled one (va), none public."""
    dmv = make_expert("dmv", "Motor Vehicles", public=False)
    ssa = make_expert("ssa", "Social Security", public=False)
    make_expert("va", "Veterans Affairs", status="disabled", public=False)
    return dmv, ssa
