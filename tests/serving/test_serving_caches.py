"""Serving's per-process caches (router version, experts, expert versions) and conversations written behind."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from experts import selectors
from experts.choices import ExpertStatus
from experts.models import Expert
from routing.models import Conversation
from serving import conversations, events, route
from serving.events import EventWriter
from tests.factories import make_expert

pytestmark = pytest.mark.django_db


@pytest.fixture
def ttl(settings):
    settings.SERVING_CACHE_TTL_S = 60.0
    route.clear_serving_caches()
    yield
    route.clear_serving_caches()


def test_active_experts_are_read_once_within_the_ttl_and_again_after_a_save(ttl):
    dmv = make_expert("dmv", "DMV", status=ExpertStatus.ACTIVE, public=False)
    assert selectors.active_expert_slugs() == {"dmv"}
    with CaptureQueriesContext(connection) as queries:
        assert selectors.active_expert_slugs() == {"dmv"}
        assert set(selectors.experts_by_slug(["dmv"])) == {"dmv"}
        assert set(selectors.experts_by_slug(["dmv"])) == {"dmv"}
    assert len(queries) == 1  # the rows, once; the slugs came from the cache
    dmv.status = ExpertStatus.DISABLED
    dmv.save()  # saving through the ORM clears the cache at once
    assert selectors.active_expert_slugs() == frozenset()


def test_without_a_ttl_every_call_reads_the_database(settings):
    settings.SERVING_CACHE_TTL_S = 0
    make_expert("dmv", "DMV", status=ExpertStatus.ACTIVE, public=False)
    with CaptureQueriesContext(connection) as queries:
        selectors.active_expert_slugs()
        selectors.active_expert_slugs()
    assert len(queries) == 2


def test_clear_serving_caches_forgets_queryset_updates_too(ttl):
    make_expert("dmv", "DMV", status=ExpertStatus.ACTIVE, public=False)
    assert selectors.active_expert_slugs() == {"dmv"}
    Expert.objects.filter(slug="dmv").update(status=ExpertStatus.DISABLED)  # no signal: only the TTL or a clear shows it
    assert selectors.active_expert_slugs() == {"dmv"}
    route.clear_serving_caches()
    assert selectors.active_expert_slugs() == frozenset()


@pytest.fixture
def behind(settings, monkeypatch):
    settings.EVENTS_SYNC = False
    writer = EventWriter(flush_ms=60_000, background=False)
    monkeypatch.setattr(events._writer, "value", writer)
    yield writer
    conversations._pending.clear()


def test_a_conversation_is_written_behind_and_resolved_from_the_pending_row_meanwhile(behind):
    state = conversations.resolve("conv_behind", api_key_id=7)
    conversations.save_turn(state, [0.1] * 8, "dmv", api_key_id=7)
    assert not Conversation.objects.filter(conversation_id="conv_behind").exists()
    again = conversations.resolve("conv_behind", api_key_id=7)  # the same process sees it before it is written
    assert not again.created
    assert again.expert == "dmv"
    assert len(again.turns) == 1
    with pytest.raises(conversations.ConversationNotAllowed):
        conversations.resolve("conv_behind", api_key_id=8)
    conversations.save_turn(again, [0.2] * 8, "ssa", api_key_id=7)
    events.flush()
    row = Conversation.objects.get(conversation_id="conv_behind")
    assert (row.expert, row.n_turns, row.api_key_id, len(row.turns)) == ("ssa", 2, 7, 2)
    assert conversations._pending == {}
    third = conversations.resolve("conv_behind", api_key_id=7)
    conversations.save_turn(third, [0.3] * 8, "ssa", api_key_id=7)
    events.flush()
    row.refresh_from_db()
    assert (row.n_turns, len(row.turns)) == (3, 3)


def test_knowledge_base_models_are_read_once_within_the_ttl_and_again_after_a_save(ttl):
    from knowledge.models import KnowledgeBase
    from knowledge.selectors import collection_models

    dmv = make_expert("dmv", "DMV", status=ExpertStatus.ACTIVE, public=False)
    kb = KnowledgeBase.objects.create(expert=dmv, embedding_model="model-a", dimension=384, chunk_size=800, chunk_overlap=100)
    assert collection_models([dmv]) == {dmv.pk: "model-a"}
    with CaptureQueriesContext(connection) as queries:
        assert collection_models([dmv]) == {dmv.pk: "model-a"}
    assert len(queries) == 0
    kb.embedding_model = "model-b"
    kb.save()
    assert collection_models([dmv]) == {dmv.pk: "model-b"}


def test_an_expired_entry_is_read_again_by_one_caller_while_the_others_keep_the_old_value(ttl, monkeypatch):
    import threading

    calls, started, release = [], threading.Event(), threading.Event()

    def slow_load():
        calls.append(1)
        started.set()
        release.wait(5)
        return "new"

    assert selectors.serving_cached("k", lambda: "old") == "old"
    clock = [selectors.time.monotonic() + 3600]  # long past the TTL
    monkeypatch.setattr(selectors.time, "monotonic", lambda: clock[0])
    refresher = threading.Thread(target=lambda: selectors.serving_cached("k", slow_load))
    refresher.start()
    assert started.wait(5)
    assert selectors.serving_cached("k", slow_load) == "old"  # no second read while one is under way
    release.set()
    refresher.join(5)
    assert calls == [1]
    assert selectors.serving_cached("k", slow_load) == "new"
    route.clear_serving_caches()
    assert selectors.serving_cached("k", lambda: "after a clear") == "after a clear"  # a clear is never served stale
