"""A small workspace for the backup tests: three experts with documents indexed in the embedded store, an active
router and a conversation's traces, all under one data folder of the test's; and how to point the settings at
another, empty one (a new machine) with an empty database."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.cache import caches
from django.db import connection

from encoders import embedding_space
from experts.models import Expert
from experts.selectors import clear_serving_caches
from knowledge.ingest import ingest_files
from knowledge.stores import get_store
from serving import route
from tests.support.hashing_encoder import use_encoder
from tests.support.serving import install_router

DOCUMENTS = {
    "dmv": {"renew.txt": "Renewing a licence. You can renew your driving licence online up to six months before it expires.",
            "lost.txt": "A lost licence is replaced at a service centre. Bring proof of identity and pay the replacement fee."},
    "ssa": {"pension.txt": "Your pension starts at full retirement age. You can claim your pension online or by phone.",
            "survivors.txt": "A survivor may receive the pension of a spouse who died. Apply at your local office."},
    "va": {"care.txt": "A veteran can get health care at any VA medical centre. Enrol online with your discharge papers.",
           "benefits.txt": "Disability benefits are paid to a veteran whose service caused an illness or injury."},
}
QUESTIONS = ["How do I renew my licence online?", "I lost my licence, what do I bring?", "When does my pension start?",
             "Can a survivor get the pension?", "Where does a veteran get health care?", "Which veteran gets disability benefits?"]


def use_data_folder(settings, var: Path) -> None:
    """Point every data path of the settings at ``var`` and forget what this process cached of the old one."""
    settings.VAR_DIR, settings.QDRANT_URL, settings.QDRANT_PATH = var, "", str(var / "qdrant")
    settings.ROUTER_DIR, settings.ADAPTER_DIR, settings.BACKUP_DIR = var / "routers", var / "adapters", var / "backups"
    get_store().close()
    get_store.cache_clear()
    route._router_cache.clear()
    clear_serving_caches()
    caches[settings.BREAKER_CACHE].clear()


@pytest.fixture
def empty_database(transactional_db):
    """A function that drops every table: the test database becomes what a new SQLite file is. The tables come back
    after the test (a copy taken before), for pytest-django's teardown and the next test."""
    import sqlite3

    saved = sqlite3.connect(":memory:")
    connection.ensure_connection()
    connection.connection.backup(saved)

    def drop() -> None:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA foreign_keys=OFF")
            for table in connection.introspection.table_names():
                cursor.execute(f'DROP TABLE "{table}"')

    yield drop
    connection.ensure_connection()
    saved.backup(connection.connection)
    saved.close()


def ask(questions: list[str]) -> list[dict]:
    """Each question's route, answer, citations and passages through the chat path."""
    from serving.chat import answer

    out = []
    for question in questions:
        result = answer(question)
        out.append({"question": question, "expert": result.expert, "answer": result.answer, "grounded": result.grounded,
                    "route": [(e["slug"], round(e["score"], 6)) for e in result.decision.experts],
                    "citations": [(c.get("document_id"), c.get("title")) for c in result.citations],
                    "passages": [(p.get("document_id"), p.get("text")) for p in result.passages]})
    return out


@pytest.fixture
def workspace(tmp_path, settings, monkeypatch, fake_encoder, transactional_db):
    """Experts dmv, ssa and va with two documents each, indexed with the keyword encoder, and the router over them."""
    settings.EVENTS_SYNC = True
    use_data_folder(settings, tmp_path / "var")
    use_encoder(monkeypatch, fake_encoder)
    monkeypatch.setattr("experts.generation.extractive.get_encoder", lambda *a, **k: fake_encoder)
    settings.EMBEDDING_MODEL = fake_encoder.name  # through the settings fixture: a monkeypatch of it leaked an override into later tests
    install_router(settings.ROUTER_DIR, settings, embedding_model=embedding_space())
    for slug, files in DOCUMENTS.items():
        report = ingest_files(Expert.objects.get(slug=slug), [(name, text.encode()) for name, text in files.items()])
        assert not report.failed, report
    yield tmp_path
    use_data_folder(settings, tmp_path / "var")
