"""sbcommon.gcfreeze: what is alive at startup is taken out of the collector's walks; later garbage is still collected."""

from __future__ import annotations

import gc
import weakref

import pytest

from sbcommon import gcfreeze


class _Node:
    pass


def test_startup_objects_are_frozen_and_new_cycles_are_still_collected():
    try:
        assert gcfreeze.freeze_startup_objects() > 1000
        assert gc.get_freeze_count() > 1000
        node = _Node()
        node.self = node  # a reference cycle made after the freeze
        ref = weakref.ref(node)
        del node
        gc.collect()
        assert ref() is None
    finally:
        gc.unfreeze()


@pytest.mark.django_db
def test_a_second_freeze_follows_the_first_requests(monkeypatch):
    from django.core.signals import request_finished

    calls = []
    monkeypatch.setattr(gcfreeze, "freeze_startup_objects", lambda: calls.append(1))
    gcfreeze.freeze_after_requests(count=3)
    for _ in range(2):
        request_finished.send(sender=None)
    assert calls == []
    request_finished.send(sender=None)
    assert calls == [1]
    request_finished.send(sender=None)  # once only: the receiver is gone
    assert calls == [1]
