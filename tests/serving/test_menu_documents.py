"""A document that is nothing but a menu (a navigation list, a link list, a tag cloud) is indexed, but never quoted.

The documents are uploaded through the documents API (the ingestion job runs in the test) beside a real
page, and the questions asked through the chat API, whose words the menus share more than the page does;
the hashing encoder stands in for MiniLM so that indexing and search are instant.
"""

from __future__ import annotations

import json

import pytest
from django.core.cache import caches
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse
from rest_framework.test import APIClient

from experts.generation import get_generator
from knowledge import search
from knowledge.models import Document
from tests.factories import make_expert
from tests.support.hashing_encoder import HashingEncoder, serve_with
from tests.support.serving import chat, meta_of

pytestmark = pytest.mark.django_db

PAGE = (b"Renewing a licence\n\nYou can renew your driving licence online up to six months before it expires. "
        b"Bring your old licence to a service centre if it expired more than two years ago.")
MENUS = {
    "menu.md": b"# Driver licences\n\n- Renew your driving licence online\n- Replace a lost driving licence\n- Driving licence fees and payments\n"
               b"- Change the address on your driving licence\n- Check your claim or appeal status\n- Contact the licence office\n",
    "links.txt": b"Renew your driving licence online\nReplace a lost driving licence\nDriving licence fees\nDriving licence renewal office hours\n"
                 b"Driving licence online services\nAbout the licence office\n",
    "tags.txt": b"TAGS: Driving licence renewal Renew licence online Licence fees Driving test Licence plates Renew registration online "
                b"Licence office hours Driving licence replacement",
    "nav.html": b"<html><head><title>Licence services</title></head><body><nav><ul>"
                b"<li><a href='/renew'>Renew your driving licence online</a></li><li><a href='/lost'>Replace a lost driving licence</a></li>"
                b"<li><a href='/fees'>Driving licence fees</a></li><li><a href='/hours'>Licence office hours</a></li>"
                b"<li><a href='/address'>Change your address online</a></li></ul></nav></body></html>",
}
MENU_ITEMS = ["Replace a lost", "fees", "Change the address", "Change your address", "appeal status", "TAGS", "office hours",
              "online services", "Contact the licence office"]
QUESTIONS = ["How do I renew my driving licence online?", "What are the driving licence fees?", "I lost my driving licence, how do I replace it?",
             "When is the licence office open?"]


@pytest.fixture
def dmv(db, settings, tmp_path, monkeypatch, owner, django_capture_on_commit_callbacks):
    """Expert dmv with the page and the four menus uploaded through the documents API and indexed."""
    from knowledge.stores import get_store

    encoder = HashingEncoder()
    serve_with(monkeypatch, settings, tmp_path, encoder)
    settings.EVENTS_SYNC = True
    get_generator.cache_clear()
    caches[settings.BREAKER_CACHE].clear()
    expert = make_expert("dmv", "Motor Vehicles", chunk_size=300, chunk_overlap=50)
    owner.is_staff = True
    owner.save(update_fields=["is_staff"])
    api = APIClient()
    api.force_authenticate(owner)
    files = [SimpleUploadedFile("renew.txt", PAGE)] + [SimpleUploadedFile(name, body) for name, body in MENUS.items()]
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post("/api/v1/experts/dmv/documents", {"files": files}, format="multipart")
    assert response.status_code == 202, response.content
    yield expert
    get_store().close()
    get_store.cache_clear()


def test_the_menus_are_indexed_and_found_by_search(dmv):
    documents = {d.external_id: d for d in Document.objects.filter(expert=dmv)}
    assert sorted(documents) == sorted(["renew.txt", *MENUS])
    assert all(d.indexed_at is not None and d.chunk_count >= 1 for d in documents.values())
    found = {h.payload["document_id"] for h in search.search_expert(dmv, "renew driving licence online", limit=10)}
    assert {documents[name].pk for name in MENUS} & found  # searchable: a menu's words still lead to its site's pages


def test_each_document_says_how_much_of_it_no_answer_quotes_and_the_console_shows_it(dmv, client, owner):
    shares = dict(Document.objects.filter(expert=dmv).values_list("external_id", "set_aside"))
    assert shares["renew.txt"] == 0.0
    assert all(shares[name] >= 0.9 for name in MENUS), shares

    client.force_login(owner)
    html = client.get(reverse("knowledge-expert", args=["dmv"])).content.decode()
    page = Document.objects.get(expert=dmv, external_id="renew.txt")
    menu = Document.objects.get(expert=dmv, external_id="menu.md")
    assert f'<td class="num" id="set-aside-{page.pk}" data-label="Set aside">none</td>' in html
    assert f'<td class="num" id="set-aside-{menu.pk}" data-label="Set aside">{round(menu.set_aside * 100)}%</td>' in html


@pytest.mark.parametrize("question", QUESTIONS)
@pytest.mark.parametrize("stream", [False, True])
def test_an_answer_never_quotes_a_menu(client, dmv, question, stream):
    response = chat(client, question, model="dmv", stream=stream)

    if stream:
        assert response.status_code == 200
        chunks = [json.loads(b[len("data: "):]) for b in b"".join(response.streaming_content).decode().split("\n\n") if b.startswith("data: {")]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c.get("choices"))
        meta = chunks[-1]["switchboard"]
    else:
        meta = meta_of(response)
        text = response.json()["choices"][0]["message"]["content"]
    menus = set(Document.objects.filter(expert=dmv, external_id__in=MENUS).values_list("pk", flat=True))
    assert not [item for item in MENU_ITEMS if item.lower() in text.lower()], text
    assert not [c for c in meta["citations"] if c["document_id"] in menus], text
    if question == QUESTIONS[0]:
        assert "up to six months before it expires" in text
