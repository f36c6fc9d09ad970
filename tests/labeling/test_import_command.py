"""``manage.py import_queries``: the report, line numbers of bad rows, reruns, redaction, files refused whole."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from labeling.models import Query

pytestmark = pytest.mark.django_db


def run_import(path: Path, *args: str) -> str:
    out, err = StringIO(), StringIO()
    call_command("import_queries", str(path), *args, stdout=out, stderr=err)
    return out.getvalue()


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return path


CSV = (
    "text,label,timestamp\n"                                # line 1
    "How do I renew my licence?,dmv,2024-01-02T10:00:00\n"  # 2
    ",dmv,\n"                                                # 3: empty text
    "Where is my tax refund?,irs,yesterday\n"                # 4: bad timestamp
    '"A question\nover two lines",va,\n'                     # 5-6
    "Wie beantrage ich einen Reisepass?,state,\n"            # 7: German is fine
    "How do I renew my licence?,dmv,2024-01-02T10:00:00\n"  # 8: same row again
    + "x" * 102_400 + ",dmv,\n"                              # 9: 100 KB of text
    "¿Cómo renuevo mi pasaporte?,state,\n"                   # 10
)


def test_a_csv_is_imported_and_bad_rows_are_reported_with_their_line_numbers(tmp_path):
    out = run_import(write(tmp_path, "log.csv", CSV), "--source", "helpdesk")

    assert "rows read            5" in out
    assert "imported             4" in out
    assert "duplicates           1" in out
    assert "rejected             3" in out
    assert "line 3: 'text' is empty" in out
    assert "line 4: 'timestamp' 'yesterday' is not an ISO 8601 date-time or Unix time" in out
    assert "line 9: 'text' is 102400 characters long; the limit is 4000" in out
    assert sorted(Query.objects.values_list("text", flat=True)) == [
        "A question over two lines", "How do I renew my licence?", "Wie beantrage ich einen Reisepass?", "¿Cómo renuevo mi pasaporte?",
    ]
    assert set(Query.objects.values_list("source", flat=True)) == {"helpdesk"}
    assert Query.objects.get(text="How do I renew my licence?").timestamp.isoformat() == "2024-01-02T10:00:00+00:00"


def test_a_jsonl_file_is_imported_and_bad_lines_are_reported(tmp_path):
    lines = [
        json.dumps({"text": "first question", "domain": "dmv", "split": "train", "answer": "Its gold answer."}),
        "[1, 2]",
        "{not json",
        "",
        json.dumps({"question": "日本語の質問です", "timestamp": 1_700_000_000}),
        json.dumps({"text": 5}),
        json.dumps({"label": "no text"}),
    ]
    out = run_import(write(tmp_path, "log.jsonl", "\n".join(lines) + "\n"))

    assert "imported             2" in out
    assert "line 2: each line must be a JSON object" in out
    assert "line 3: invalid JSON: Expecting property name enclosed in double quotes" in out
    assert "line 6: 'text' must be a string" in out
    assert "line 7: missing 'text'" in out
    assert Query.objects.get(text="first question").label == "dmv"
    assert Query.objects.get(text="first question").answer == "Its gold answer."
    assert Query.objects.get(text="日本語の質問です").answer == ""
    assert Query.objects.get(text="日本語の質問です").timestamp.year == 2023
    assert set(Query.objects.values_list("source", flat=True)) == {"log"}  # the file name by default


def test_a_rerun_imports_nothing_twice(tmp_path):
    path = write(tmp_path, "log.csv", CSV)
    run_import(path)

    out = run_import(path)

    assert "imported             0" in out
    assert "duplicates           5" in out
    assert Query.objects.count() == 4


def test_redaction_replaces_emails_and_phone_numbers(tmp_path):
    path = write(tmp_path, "log.csv", "text\nMail jane.doe@example.com or call +1 555 123 4567 about my claim\n")

    run_import(path, "--redact")

    assert Query.objects.get().text == "Mail [EMAIL] or call [PHONE] about my claim"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "the file is empty"),
        (b"\n  \n", "the file is empty"),
        ("text\ncaf\u00e9 au lait\n".encode("latin-1"), "the file is not UTF-8 (byte 0xe9 on line 2 cannot be decoded)"),
        ("text\nhello\n".encode("utf-16"), "the file is UTF-16 encoded"),
        (b"question_text,answer\nhi,there\n", "the CSV has no 'text' column (columns found: 'question_text', 'answer')"),
    ],
)
def test_a_file_that_cannot_be_imported_is_refused_whole(tmp_path, content, message):
    path = write(tmp_path, "bad.csv", content)

    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        run_import(path)
    assert not Query.objects.exists()


def test_a_jsonl_file_whose_first_line_is_not_an_object_is_refused(tmp_path):
    path = write(tmp_path, "bad.jsonl", '[{"text": "a"}, {"text": "b"}]\n')

    with pytest.raises(CommandError, match="the first line is a JSON list, not an object"):
        run_import(path)


def test_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        run_import(tmp_path / "nowhere.csv")
