"""Streaming parsers for query logs (CSV and JSONL), row by row with line numbers.

Columns are mapped by name: ``text`` is required; ``timestamp``, ``user``, ``conversation``,
``label`` (aliases ``domain``) and ``split`` are optional. Invalid rows are reported, never fatal.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import IO, Any

from django.utils.dateparse import parse_datetime

MAX_QUERY_CHARS = 4000
ALIASES = {"domain": "label", "query": "text", "question": "text", "utterance": "text", "conversation_id": "conversation", "user_id": "user"}
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PHONE = re.compile(r"(?<!\w)(?:\+?\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)|\d{2,4})[\s.-]?\d{3,4}[\s.-]?\d{3,4}(?!\w)")


@dataclass
class Row:
    line: int
    text: str
    label: str = ""
    user: str = ""
    conversation: str = ""
    timestamp: datetime | None = None
    split: str = ""


@dataclass
class RowError:
    line: int
    reason: str


def redact(text: str) -> str:
    """Replace e-mail addresses and phone numbers with placeholders."""
    return _PHONE.sub("[PHONE]", _EMAIL.sub("[EMAIL]", text))


def _clean(record: dict[str, Any], line: int, do_redact: bool) -> Row | RowError:
    record = {ALIASES.get(str(k).strip().lower(), str(k).strip().lower()): v for k, v in record.items() if k is not None}
    text = record.get("text")
    if text is None:
        return RowError(line, "missing 'text'")
    if not isinstance(text, str):
        return RowError(line, "'text' must be a string")
    text = " ".join(text.split())
    if not text:
        return RowError(line, "'text' is empty")
    if len(text) > MAX_QUERY_CHARS:
        return RowError(line, f"'text' is longer than {MAX_QUERY_CHARS} characters")
    timestamp = None
    raw_ts = record.get("timestamp")
    if raw_ts not in (None, ""):
        try:
            timestamp = parse_datetime(str(raw_ts))
        except ValueError:
            timestamp = None
        if timestamp is None:
            return RowError(line, f"'timestamp' {str(raw_ts)[:40]!r} is not an ISO 8601 date-time")
    fields = {}
    for name in ("label", "user", "conversation", "split"):
        value = record.get(name)
        fields[name] = "" if value is None else str(value).strip()[:128]
    if do_redact:
        text = redact(text)
    return Row(line=line, text=text, timestamp=timestamp, **fields)


def detect_format(name: str, head: bytes) -> str:
    """'jsonl' or 'csv' from the file name, else from the first bytes."""
    lowered = name.lower()
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lowered.endswith((".csv", ".tsv")):
        return "csv"
    return "jsonl" if head.lstrip().startswith(b"{") else "csv"


def iter_rows(stream: IO[bytes], fmt: str, do_redact: bool = False) -> Iterator[Row | RowError]:
    """Yield a ``Row`` or ``RowError`` per input line, streaming (never loads the whole file)."""
    text_stream = io.TextIOWrapper(stream, encoding="utf-8", errors="strict", newline="")
    try:
        if fmt == "jsonl":
            for line_no, line in enumerate(text_stream, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as exc:
                    yield RowError(line_no, f"invalid JSON: {exc.msg}")
                    continue
                if not isinstance(record, dict):
                    yield RowError(line_no, "each line must be a JSON object")
                    continue
                yield _clean(record, line_no, do_redact)
        elif fmt == "csv":
            reader = csv.DictReader(text_stream)
            headers = {ALIASES.get(h.strip().lower(), h.strip().lower()) for h in (reader.fieldnames or [])}
            if "text" not in headers:
                yield RowError(1, "the CSV header has no 'text' column")
                return
            for record in reader:
                yield _clean(record, reader.line_num, do_redact)
        else:
            raise ValueError(f"unknown format {fmt!r}")
    except UnicodeDecodeError:
        yield RowError(-1, "the file is not valid UTF-8")
    except csv.Error as exc:
        yield RowError(-1, f"malformed CSV: {exc}")
    finally:
        text_stream.detach()
