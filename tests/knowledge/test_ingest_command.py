"""``manage.py ingest_docs --expert SLUG PATH...``: files and folders, in this process, with a report."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Document

from .conftest import make_docx

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    from io import StringIO

    out, err = StringIO(), StringIO()
    call_command("ingest_docs", *args, stdout=out, stderr=err)
    return out.getvalue()


def test_it_ingests_files_and_folders_and_indexes_them(kb, dmv, tmp_path):
    folder = tmp_path / "docs"
    (folder / "sub").mkdir(parents=True)
    (folder / "renew.md").write_text("# Renewals\n\nRenew online.")
    (folder / "sub" / "guide.docx").write_bytes(make_docx("Guide", [("Normal", "Bring two proofs of identity.")]))
    (folder / ".hidden.txt").write_text("skipped")
    single = tmp_path / "plates.txt"
    single.write_text("Licence plates\n\nOrder them online.")

    output = run("--expert", "dmv", str(folder), str(single))

    assert sorted(Document.objects.values_list("external_id", "title")) == [("guide.docx", "Guide"), ("plates.txt", "Licence plates"), ("renew.md", "Renewals")]
    assert all(d.indexed_at for d in Document.objects.all())
    assert "created 3, updated 0, unchanged 0" in output
    assert "Done." in output
    assert kb.count("expert_dmv") == sum(Document.objects.values_list("chunk_count", flat=True))


def test_running_it_again_changes_nothing(kb, dmv, tmp_path):
    path = tmp_path / "renew.txt"
    path.write_text("Renew your licence online.")
    run("--expert", "dmv", str(path))

    output = run("--expert", "dmv", str(path))

    assert "created 0, updated 0, unchanged 1" in output
    assert Document.objects.get().version == 1


def test_bad_files_are_reported_the_others_ingested_and_the_command_fails(kb, dmv, tmp_path):
    (tmp_path / "good.txt").write_text("Renew online.")
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02\x03" * 100)

    with pytest.raises(CommandError, match=r"2 file\(s\) could not be ingested; the others were"):
        run("--expert", "dmv", str(tmp_path))

    assert list(Document.objects.values_list("external_id", flat=True)) == ["good.txt"]


def test_an_unknown_expert_or_path_is_an_error(kb, dmv, tmp_path):
    with pytest.raises(CommandError, match="no expert with slug 'nobody'"):
        run("--expert", "nobody", str(tmp_path))
    with pytest.raises(CommandError, match="no such file or folder"):
        run("--expert", "dmv", str(tmp_path / "missing.txt"))


def test_no_index_stores_the_documents_pending(kb, dmv, tmp_path):
    (tmp_path / "a.txt").write_text("Renew online.")

    run("--expert", "dmv", "--no-index", str(tmp_path))

    assert Document.objects.get().indexed_at is None
    assert kb.count("expert_dmv") == 0
