"""Property tests for the query-log importers: any CSV/JSONL rows give rows or per-row errors, never an exception."""

from __future__ import annotations

import csv
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labeling.importers import MAX_QUERY_CHARS, Row, RowError, UnreadableFile, iter_rows, sniff

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
VALUES = st.one_of(st.text(max_size=60), st.integers(), st.floats(allow_nan=True), st.booleans(), st.none(),
                   st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
KEYS = st.sampled_from(["text", "query", "question", "timestamp", "user", "conversation", "label", "domain", "split", "other", ""])


def _rows(data: bytes, fmt: str) -> list[Row | RowError]:
    return list(iter_rows(io.BytesIO(data), fmt))


@FAST
@given(records=st.lists(st.one_of(st.dictionaries(KEYS, VALUES, max_size=6), VALUES), max_size=30))
def test_jsonl_records_of_any_shape_give_a_row_or_an_error_each(records):
    data = "\n".join(json.dumps(r) for r in records).encode()
    out = _rows(data, "jsonl")
    assert len(out) == len(records)
    for item in out:
        assert isinstance(item, Row | RowError)
        if isinstance(item, Row):
            assert item.text.strip()
            assert len(item.text) <= MAX_QUERY_CHARS
            assert "\x00" not in item.text
        else:
            assert item.reason


@FAST
@given(data=st.binary(max_size=4096), fmt=st.sampled_from(["jsonl", "csv", "tsv"]))
def test_arbitrary_bytes_never_raise_from_the_row_reader(data, fmt):
    for item in _rows(data, fmt):
        assert isinstance(item, Row | RowError)
        if isinstance(item, RowError):
            assert item.line >= 1
            assert item.reason


@FAST
@given(header=st.lists(KEYS, min_size=1, max_size=5), cells=st.lists(st.lists(st.text(max_size=30), max_size=7), max_size=20))
def test_csv_with_any_header_and_cells_gives_rows_or_errors_with_line_numbers(header, cells):
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(header)
    writer.writerows(cells)
    out = _rows(buffer.getvalue().encode("utf-8"), "csv")
    lines = [item.line for item in out]
    assert lines == sorted(lines)
    assert all(line >= 1 for line in lines)


@FAST
@given(head=st.binary(max_size=2048), name=st.sampled_from(["q.csv", "q.tsv", "q.jsonl", "q.json", "q", ""]), complete=st.booleans())
def test_sniff_accepts_or_refuses_with_a_message_but_never_crashes(head, name, complete):
    try:
        result, refusal = sniff(head, name, complete=complete), ""
    except UnreadableFile as exc:
        result, refusal = None, str(exc)
    if result is None:
        assert refusal
        return
    assert result.fmt in ("csv", "tsv", "jsonl")


@pytest.mark.parametrize("text", ["What is my balance?", "Héllo wörld ✓", "tab\tseparated words"])
def test_a_valid_text_survives_the_jsonl_round_trip(text):
    (row,) = _rows(json.dumps({"text": text}).encode(), "jsonl")
    assert row.text == " ".join(text.split())
