"""The streaming row parser and the first-bytes check, on inputs that go wrong one row at a time."""

from __future__ import annotations

import io
import json

import pytest

from labeling.importers import MAX_LINE_BYTES, Row, RowError, UnreadableFile, detect_format, iter_rows, sniff


def parse(content: bytes, fmt: str) -> list[Row | RowError]:
    return list(iter_rows(io.BytesIO(content), fmt))


def test_an_undecodable_line_deep_in_the_file_costs_that_row_only():
    good = b"".join(json.dumps({"text": f"question {i}"}).encode() + b"\n" for i in range(3000))
    items = parse(good + b'{"text": "caf\xe9"}\n' + b'{"text": "after"}\n', "jsonl")

    errors = [i for i in items if isinstance(i, RowError)]
    assert [(e.line, e.reason) for e in errors] == [(3001, "not UTF-8 (byte 0xe9 at column 14)")]
    assert items[-1] == Row(line=3002, text="after")


def test_an_oversized_line_is_skipped_without_reading_it_into_memory():
    huge = b'{"text": "' + b"y" * (MAX_LINE_BYTES * 2) + b'"}\n'
    items = parse(b'{"text": "before"}\n' + huge + b'{"text": "after"}\n', "jsonl")

    assert [type(i).__name__ for i in items] == ["Row", "RowError", "Row"]
    assert items[1] == RowError(2, "the line is longer than 1024 KiB")
    assert items[2].line == 3


def test_csv_records_over_several_lines_carry_the_number_of_their_first_line():
    items = parse(b'text,label\n"one\ntwo\nthree",a\nfour,b\n', "csv")

    assert items == [Row(line=2, text="one two three", label="a"), Row(line=5, text="four", label="b")]


def test_a_csv_row_with_more_fields_than_the_header_is_rejected():
    items = parse(b"text,label\nhello, world,a\n", "csv")

    assert items == [RowError(2, "3 fields but the header has 2 (an unquoted delimiter in the text?)")]


def test_tsv_bom_and_column_aliases_are_understood():
    items = parse("\ufeffQuestion\tDomain\nhello there\tdmv\n".encode(), "tsv")

    assert items == [Row(line=2, text="hello there", label="dmv")]


def test_control_characters_are_dropped_and_lone_surrogates_rejected():
    items = parse(b'{"text": "a\\u0000b\\u0007c"}\n{"text": "\\ud800"}\n{"text": "ok", "user": "\\udfff"}\n', "jsonl")

    assert items == [
        Row(line=1, text="abc"),
        RowError(2, "'text' holds invalid Unicode (an unpaired surrogate)"),
        RowError(3, "'user' holds invalid Unicode (an unpaired surrogate)"),
    ]


def test_timestamps_are_aware_whether_iso_naive_iso_or_unix_seconds():
    items = parse(b'{"text": "a", "timestamp": "2024-05-01 12:00"}\n{"text": "b", "timestamp": "1700000000"}\n'
                  b'{"text": "c", "timestamp": "2024-05-01T12:00:00+02:00"}\n', "jsonl")

    assert [i.timestamp.isoformat() for i in items] == ["2024-05-01T12:00:00+00:00", "2023-11-14T22:13:20+00:00", "2024-05-01T12:00:00+02:00"]


def test_the_format_comes_from_the_name_then_from_the_content():
    assert detect_format("log.JSONL", b"text\n") == "jsonl"
    assert detect_format("log.tsv", b"") == "tsv"
    assert detect_format("log.txt", b'\xef\xbb\xbf {"text": 1}') == "jsonl"
    assert detect_format("log", b"text\nhello") == "csv"


def test_sniff_accepts_a_head_cut_inside_a_multibyte_character():
    head = ("text\n" + "é" * 100).encode()[:-1]  # the cut leaves half an "é"

    assert sniff(head, "log.csv", complete=False).columns == ["text"]
    with pytest.raises(UnreadableFile, match="not UTF-8"):
        sniff(head, "log.csv", complete=True)


def test_sniff_names_the_columns_it_found_and_the_accepted_names():
    with pytest.raises(UnreadableFile) as caught:
        sniff(b"id,body\n1,hello\n", "log.csv", complete=True)

    assert str(caught.value) == (
        "the CSV has no 'text' column (columns found: 'id', 'body'); name the column holding the queries "
        "'text' or 'query' or 'question' or 'utterance'"
    )


def test_sniff_explains_a_json_array_given_as_jsonl():
    with pytest.raises(UnreadableFile, match="the first line is a JSON list, not an object"):
        sniff(b'[{"text": "a"}]\n', "log.jsonl", complete=True)
    with pytest.raises(UnreadableFile, match="looks like one JSON array"):
        sniff(b'[{"text": "a"},\n{"text": "b"}]\n', "log.jsonl", complete=True)


def test_a_gold_answer_column_is_kept_cleaned_and_checked():
    items = parse(
        b'{"text": "how do I renew?", "answer": "Renew  online\\u0007 at the DMV."}\n'
        b'{"text": "plates?", "gold_answer": "At a service centre."}\n'
        b'{"text": "too long", "answer": "' + b"a" * 20001 + b'"}\n',
        "jsonl",
    )

    assert items[0] == Row(line=1, text="how do I renew?", answer="Renew online at the DMV.")
    assert items[1].answer == "At a service centre."
    assert items[2] == RowError(3, "'answer' is 20001 characters long; the limit is 20000")
