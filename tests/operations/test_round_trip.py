"""A backup restored into an empty data folder and an empty database answers as the original did.

The workspace (``conftest.workspace``): three experts with documents indexed in the embedded store, an
active router, and the traces of the questions asked. After ``backup``, the settings point at a new data
folder, every table is dropped, and ``restore`` fills them again: the same questions get the same routes,
answers, citations and passages through ``serving.chat.answer``.
"""

from __future__ import annotations

import json
from pathlib import Path

from knowledge.stores import get_store
from operations.backup import backup
from operations.restore import restore
from routing.models import RouterVersion, RoutingEvent
from tests.operations.conftest import QUESTIONS, ask, use_data_folder


def test_a_restored_backup_answers_the_same_questions_the_same_way(workspace, settings, empty_database):
    before = ask(QUESTIONS)
    assert {a["expert"] for a in before} == {"dmv", "ssa", "va"}
    assert all(a["citations"] for a in before)
    events = RoutingEvent.objects.count()
    assert events == len(QUESTIONS)
    counts = {name: get_store().count(name) for name in ("expert_dmv", "expert_ssa", "expert_va")}

    manifest = backup(workspace / "backup")
    assert sorted(manifest["collections"]) == ["expert_dmv", "expert_ssa", "expert_va"]
    assert manifest["migrations"]["routing"]
    assert manifest["database"] == {"engine": "sqlite", "file": "database/switchboard.sqlite3"}
    assert json.loads((workspace / "backup" / "manifest.json").read_text()) == manifest
    assert not (workspace / "backup" / ".partial").exists()

    use_data_folder(settings, workspace / "new")
    empty_database()
    restore(workspace / "backup")

    assert RoutingEvent.objects.count() == events  # the traces came back
    assert {name: get_store().count(name) for name in counts} == counts
    version = RouterVersion.objects.get(is_active=True)
    assert Path(version.path) == settings.ROUTER_DIR / "v1"
    assert (Path(version.path) / "config.json").is_file()
    assert ask(QUESTIONS) == before
