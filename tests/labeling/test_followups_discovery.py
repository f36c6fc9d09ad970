"""Discovery clusters the questions that open a conversation; its follow-ups go with their conversation's first question."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.conf import settings

from labeling import services
from labeling.models import Assignment, Embedding, Query
from sbcommon.hashing import text_hash

pytestmark = pytest.mark.django_db
TOPICS = {0: "renew driving licence", 1: "passport appointment", 2: "state pension age"}
FOLLOW_UP = "When did it take place?"


def vector(axis: int, rng) -> bytes:
    v = np.zeros(16, dtype=np.float32)
    v[axis] = 1.0
    v += 0.03 * rng.normal(size=16).astype(np.float32)
    return (v / np.linalg.norm(v)).astype("<f4").tobytes()


def log(with_conversations: bool) -> None:
    """Eight conversations a topic: the opening question, then the same generic follow-up (its own direction, axis 9)."""
    rng = np.random.default_rng(0)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=text_hash(FOLLOW_UP), vector=vector(9, rng))
    for axis, topic in TOPICS.items():
        for i in range(8):
            conversation = f"c-{axis}-{i}" if with_conversations else ""
            opener = f"{topic} question {i}"
            Embedding.objects.create(model=settings.EMBEDDING_MODEL, text_hash=text_hash(opener), vector=vector(axis, rng))
            # The follow-up is imported first: the conversation's opener is the earliest by time, not by import order.
            Query.objects.create(text=FOLLOW_UP, text_hash=text_hash(FOLLOW_UP), row_hash=text_hash(f"f:{axis}:{i}"), source="chat",
                                 conversation=conversation, timestamp=start + timedelta(minutes=i + 1) if with_conversations else None)
            Query.objects.create(text=opener, text_hash=text_hash(opener), row_hash=text_hash(f"o:{axis}:{i}"), source="chat",
                                 conversation=conversation, timestamp=start + timedelta(minutes=i) if with_conversations else None)


def test_follow_ups_never_seed_or_name_a_proposal_and_join_their_conversations_opener():
    log(with_conversations=True)

    run = services.cluster_queries(source="chat", eps=0.2, min_samples=3)

    proposals = list(run.proposals.all())
    assert len(proposals) == 3
    assert not any(FOLLOW_UP in p.representatives or "place" in p.keywords for p in proposals)
    for follow_up in Assignment.objects.filter(run=run, query__text=FOLLOW_UP).select_related("query"):
        opener = Assignment.objects.get(run=run, query__conversation=follow_up.query.conversation, query__text__startswith=TOPICS[int(follow_up.query.conversation.split("-")[1])])
        assert follow_up.proposal_id == opener.proposal_id
    assert sum(p.size for p in proposals) == 48
    assert run.n_queries == 48


def test_a_log_without_conversations_clusters_every_question():
    log(with_conversations=False)

    run = services.cluster_queries(source="chat", eps=0.2, min_samples=3)

    # The 24 identical follow-ups stand alone: they make a topic of their own, as any question does without a conversation.
    assert any(FOLLOW_UP in p.representatives for p in run.proposals.all())


def test_each_question_finds_its_conversations_opener():
    t = datetime(2026, 1, 1, tzinfo=UTC)
    turns = [("a", t + timedelta(minutes=2)), ("", None), ("a", t), ("b", None), ("b", None), ("a", None)]
    assert services.conversation_openers(turns) == [2, 1, 2, 3, 3, 2]
