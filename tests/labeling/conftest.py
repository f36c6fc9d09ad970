"""Fixtures for the labeling tests: a logged-in console, teams, and clustering runs built from hand-made embeddings.

The console's user (``owner``, not staff) is a member of ``team``, which owns the runs ``make_run``
builds unless told otherwise: Discovery shows a run to its team's members and staff only.

Embeddings are inserted as rows (no encoder is loaded): each proposal's queries point along their
own axis with a little jitter, so cohesion, nearest proposals and distances are known in advance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from django.conf import settings
from django.contrib.auth.models import Group

from labeling.models import Assignment, ClusteringRun, Embedding, Proposal, Query
from labeling.proposals import ensure_proposal_stats
from sbcommon.hashing import text_hash

DIM = 16
PASSWORD = "correct horse battery staple"
XHR = {"X-Requested-With": "XMLHttpRequest"}  # how upload.js posts: answered in JSON
CSV = b"text\nHow do I renew my licence?\nWhere is my refund?\n"  # a query log of two questions


@pytest.fixture
def var_dir(tmp_path, settings):
    """Uploads and job files land in tmp_path."""
    settings.VAR_DIR = tmp_path


@pytest.fixture
def team(db) -> Group:
    """The team ``owner`` reviews for; ``make_run``'s runs belong to it."""
    return Group.objects.create(name="Reviewers")


@pytest.fixture
def console(client, owner, team):
    owner.groups.add(team)
    client.force_login(owner)
    return client


def add_query(text: str, vector: np.ndarray, source: str = "test", team: Group | None = None) -> Query:
    """A query imported by ``team`` (``None``: staff only) and its cached embedding."""
    h = text_hash(text)
    key = f"{source}:{text}" if team is None else f"{team.pk}:{source}:{text}"
    query = Query.objects.create(text=text, text_hash=h, row_hash=text_hash(key), source=source or "test", team=team)
    Embedding.objects.get_or_create(model=settings.EMBEDDING_MODEL, text_hash=h, defaults={"vector": vector.astype("<f4").tobytes()})
    return query


def direction(axis: int | list[int], jitter: float = 0.0, seed: int = 0) -> np.ndarray:
    """A unit vector along ``axis`` (or between several axes), jittered a little."""
    v = np.zeros(DIM, dtype=np.float32)
    v[axis] = 1.0
    if jitter:
        v = v + jitter * np.random.default_rng(seed).normal(size=DIM).astype(np.float32)
    return v / np.linalg.norm(v)


MakeRun = Callable[..., ClusteringRun]


@pytest.fixture
def make_run(db, team) -> MakeRun:
    """Build a clustering run: ``groups`` maps a proposal name to (axis, texts) or (axis, {topic: texts}).

    Noise queries get topic -1: ``noise`` maps a text to its vector and ``noise_in`` names the
    proposal they sit in (``None``: unassigned). The run and its queries belong to ``team`` (default:
    the ``team`` fixture; ``None``: staff only); ``source`` names the run's source and its queries'
    (default: the run has none, its queries come from "test").
    """
    counter = {"seed": 0}
    default_team = team

    def make(groups: dict[str, tuple[int, list[str] | dict[int, list[str]]]], noise: dict[str, np.ndarray] | None = None,
             noise_in: str | None = None, team: Any = default_team, source: str = "") -> ClusteringRun:
        n_queries = sum(len(t) if isinstance(t, list) else sum(len(v) for v in t.values()) for _, t in groups.values()) + len(noise or {})
        run = ClusteringRun.objects.create(
            model=settings.EMBEDDING_MODEL, eps=0.2, min_samples=3, n_experts=len(groups), fingerprint=f"test-{counter['seed']}",
            n_queries=n_queries, n_topics=len(groups), noise_share=len(noise or {}) / max(n_queries, 1), team=team, source=source,
        )
        proposals = {}
        topic_base = 0
        for index, (name, (axis, texts)) in enumerate(groups.items()):
            proposal = Proposal.objects.create(run=run, index=index, name=name, keywords=name.lower().split(), representatives=[])
            proposals[name] = proposal
            by_topic = texts if isinstance(texts, dict) else {0: texts}
            for topic, members in by_topic.items():
                # Sub-topics of one proposal lean towards a neighbouring axis, so a split can tell them apart.
                lean = [axis] if topic == 0 else [axis, (axis + 7 + topic) % DIM]
                for text in members:
                    counter["seed"] += 1
                    q = add_query(text, direction(lean, jitter=0.05, seed=counter["seed"]), source=source or "test", team=team)
                    Assignment.objects.create(run=run, query=q, topic=topic_base + topic, proposal=proposal)
            representatives = [t for members in by_topic.values() for t in members][:3]
            Proposal.objects.filter(pk=proposal.pk).update(representatives=representatives, size=Assignment.objects.filter(proposal=proposal).count())
            topic_base += len(by_topic)
        for text, vector in (noise or {}).items():
            q = add_query(text, vector, source=source or "test", team=team)
            Assignment.objects.create(run=run, query=q, topic=-1, proposal=proposals.get(noise_in) if noise_in else None)
        if noise_in:
            Proposal.objects.filter(pk=proposals[noise_in].pk).update(size=Assignment.objects.filter(proposal=proposals[noise_in]).count())
        ensure_proposal_stats(run)
        return run

    return make


@pytest.fixture
def three_topics(make_run) -> ClusteringRun:
    """Licences (axis 0), passports (axis 1) and pensions (axis 2), with two stray queries left unassigned."""
    return make_run(
        {
            "Licences": (0, [f"renew my driving licence {i}" for i in range(6)]),
            "Passports": (1, [f"passport appointment {i}" for i in range(4)]),
            "Pensions": (2, [f"state pension age {i}" for i in range(2)]),
        },
        noise={"close to licences": direction([0, 5]), "far from everything": direction(9)},
    )


def proposal(run: ClusteringRun, name: str) -> Proposal:
    return run.proposals.get(name=name)
