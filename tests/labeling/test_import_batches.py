"""Nothing is half-imported: a batch the database refuses is rolled back alone, reported by its lines, and a rerun completes it."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import OperationalError

from labeling import services
from labeling.models import Query

pytestmark = pytest.mark.django_db


@pytest.fixture
def log(tmp_path, monkeypatch):
    monkeypatch.setattr(services, "IMPORT_BATCH", 10)
    path = tmp_path / "log.csv"
    path.write_text("text\n" + "".join(f"question number {i}\n" for i in range(25)))  # lines 2-26: batches 2-11, 12-21, 22-26
    return path


def fail_second_batch(monkeypatch, error: str, written: int = 0) -> None:
    """The second batch's ``bulk_create`` raises ``error`` after writing its first ``written`` rows; the others go through."""
    real = Query.objects.bulk_create
    calls = {"n": 0}

    def flaky(objs, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            real(objs[:written], *args, **kwargs)
            raise OperationalError(error)
        return real(objs, *args, **kwargs)

    monkeypatch.setattr(Query.objects, "bulk_create", flaky)


def test_a_failing_batch_rolls_back_alone_and_the_report_names_its_lines(log, monkeypatch):
    fail_second_batch(monkeypatch, "database is locked", written=3)  # part of the batch is written before the database gives up
    out = StringIO()

    with pytest.raises(CommandError, match="10 rows were not imported"):
        call_command("import_queries", str(log), stdout=out, stderr=StringIO())

    assert "lines 12-21 not imported (10 rows): database is locked" in out.getvalue()
    texts = set(Query.objects.values_list("text", flat=True))
    assert len(texts) == 15
    assert not any(f"question number {i}" in texts for i in range(10, 20))  # the batch's first three rows were rolled back too


def test_a_rerun_after_a_failed_batch_completes_without_duplicates(log, monkeypatch):
    fail_second_batch(monkeypatch, "disk I/O error")
    with open(log, "rb") as handle:
        first = services.import_queries(handle, "log.csv", "log")
    with open(log, "rb") as handle:
        second = services.import_queries(handle, "log.csv", "log")

    assert (first.imported, first.failed_rows, first.failed_batches[0]["first_line"]) == (15, 10, 12)
    assert (second.imported, second.duplicates, second.failed_rows) == (10, 15, 0)
    assert Query.objects.count() == 25
