"""Fixtures of the console page tests."""

import pytest

from experts.models import Expert


@pytest.fixture
def experts():
    """Two active experts (dmv, ssa) and a disabled one (va), none public."""
    dmv = Expert.objects.create(slug="dmv", name="Motor Vehicles")
    ssa = Expert.objects.create(slug="ssa", name="Social Security")
    Expert.objects.create(slug="va", name="Veterans Affairs", status="disabled")
    return dmv, ssa
