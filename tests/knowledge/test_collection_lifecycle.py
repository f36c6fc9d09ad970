"""An expert's collection lives and dies with its row: an expert made again under a deleted one's slug serves nothing of it."""

from __future__ import annotations

import pytest

from experts.models import Expert
from knowledge.indexing import index_pending
from knowledge.ingest import upsert_document
from knowledge.parsers import DocumentInput
from knowledge.search import search_expert
from knowledge.selectors import collection_name
from tests.factories import make_expert

pytestmark = pytest.mark.django_db(transaction=True)  # the drops run on commit


def indexed(slug: str, text: str) -> Expert:
    expert = make_expert(slug, slug.title(), chunk_size=300, chunk_overlap=50, public=False)
    upsert_document(expert, DocumentInput(external_id="d", title="Handbook", text=text))
    index_pending(expert)
    return expert


def test_deleting_an_expert_drops_its_collection_and_its_successor_serves_none_of_it(kb):
    old = indexed("pensions", "Team A's secret pension appeal procedure is kept in room 12.")
    name = collection_name(old)
    assert kb.count(name) > 0

    old.delete()

    assert kb.count(name) == 0
    new = make_expert("pensions", "Pensions", public=False)
    assert search_expert(new, "pension appeal procedure room", limit=5) == []


def test_a_new_expert_finds_its_collection_empty_whatever_a_deleted_one_left(kb):
    old = indexed("pensions", "Team A's secret pension appeal procedure is kept in room 12.")
    name = collection_name(old)
    Expert.objects.filter(pk=old.pk).update(slug="renamed")  # no signal: as if the store was down when "pensions" went
    assert kb.count(name) > 0

    new = make_expert("pensions", "Pensions", public=False)

    assert kb.count(name) == 0
    assert search_expert(new, "pension appeal procedure room", limit=5) == []
