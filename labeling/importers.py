"""Streaming parsers for query logs (CSV, TSV and JSONL), row by row with line numbers.

Columns are mapped by name: ``text`` is required (aliases ``query``, ``question``, ``utterance``);
``timestamp``, ``user``, ``conversation``, ``label`` (alias ``domain``), ``split`` and ``answer`` (a gold
answer, alias ``gold_answer``) are optional.
A bad row (undecodable, oversized, malformed) is reported with its line number, never fatal;
``sniff`` refuses a hopeless file from its first bytes, before anything is stored.
"""

from __future__ import annotations

import codecs
import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

MAX_QUERY_CHARS = 4000
MAX_ANSWER_CHARS = 20000
# A physical line longer than this is skipped unread (a query log has no business holding one).
MAX_LINE_BYTES = 1024 * 1024
SNIFF_BYTES = 64 * 1024
ALIASES = {
    "domain": "label", "query": "text", "question": "text", "utterance": "text",
    "conversation_id": "conversation", "user_id": "user", "gold_answer": "answer",
}
TEXT_ALIASES = ("text", "query", "question", "utterance")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+\.[\w.-]+")
_PHONE = re.compile(r"(?<!\w)(?:\+?\d{1,3}[\s.-]?)?(?:\(\d{2,4}\)|\d{2,4})[\s.-]?\d{3,4}[\s.-]?\d{3,4}(?!\w)")
# C0 controls other than tab/newline/carriage return: PostgreSQL refuses NUL, and none belong in a query.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

# The CSV reader refuses fields over 128 KiB by default and stops the whole file; our own limits apply per row.
csv.field_size_limit(MAX_LINE_BYTES * 4)


@dataclass
class Row:
    line: int
    text: str
    label: str = ""
    user: str = ""
    conversation: str = ""
    timestamp: datetime | None = None
    split: str = ""
    answer: str = ""


@dataclass
class RowError:
    line: int
    reason: str


class UnreadableFile(ValueError):
    """The file as a whole cannot be imported (empty, not UTF-8, no text column, not JSON Lines)."""


@dataclass
class Sniff:
    """What the first bytes of a file say: its format and, for CSV, the header's columns."""

    fmt: str
    columns: list[str] = field(default_factory=list)


def redact(text: str) -> str:
    """Replace e-mail addresses and phone numbers with placeholders."""
    return _PHONE.sub("[PHONE]", _EMAIL.sub("[EMAIL]", text))


def _canonical(name: Any) -> str:
    key = str(name).strip().lower().lstrip("\ufeff")
    return ALIASES.get(key, key)


def _encodable(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, which JSON's \ud800 escapes can produce
        return False
    return True


def _timestamp(raw: Any) -> datetime | None:
    """An aware datetime from ISO 8601 or Unix seconds; ``ValueError`` if it is neither."""
    if isinstance(raw, bool):
        raise ValueError
    if isinstance(raw, int | float) or (isinstance(raw, str) and re.fullmatch(r"\d{9,11}(\.\d+)?", raw.strip())):
        return datetime.fromtimestamp(float(raw), tz=UTC)
    parsed = parse_datetime(str(raw).strip())
    if parsed is None:
        raise ValueError
    return timezone.make_aware(parsed, UTC) if timezone.is_naive(parsed) else parsed


def _clean(record: dict[str, Any], line: int, do_redact: bool) -> Row | RowError:
    record = {_canonical(k): v for k, v in record.items() if k is not None}
    text = record.get("text")
    if text is None:
        return RowError(line, "missing 'text'")
    if not isinstance(text, str):
        return RowError(line, "'text' must be a string")
    if not _encodable(text):
        return RowError(line, "'text' holds invalid Unicode (an unpaired surrogate)")
    text = " ".join(_CONTROL.sub("", text).split())
    if not text:
        return RowError(line, "'text' is empty")
    if len(text) > MAX_QUERY_CHARS:
        return RowError(line, f"'text' is {len(text)} characters long; the limit is {MAX_QUERY_CHARS}")
    timestamp = None
    raw_ts = record.get("timestamp")
    if raw_ts not in (None, ""):
        try:
            timestamp = _timestamp(raw_ts)
        except (ValueError, OverflowError, OSError):
            return RowError(line, f"'timestamp' {str(raw_ts)[:40]!r} is not an ISO 8601 date-time or Unix time")
    fields = {}
    for name in ("label", "user", "conversation", "split"):
        value = record.get(name)
        value = "" if value is None else _CONTROL.sub("", str(value)).strip()[:128]
        if not _encodable(value):
            return RowError(line, f"'{name}' holds invalid Unicode (an unpaired surrogate)")
        fields[name] = value
    answer = record.get("answer")
    answer = "" if answer is None else " ".join(_CONTROL.sub("", str(answer)).split())
    if not _encodable(answer):
        return RowError(line, "'answer' holds invalid Unicode (an unpaired surrogate)")
    if len(answer) > MAX_ANSWER_CHARS:
        return RowError(line, f"'answer' is {len(answer)} characters long; the limit is {MAX_ANSWER_CHARS}")
    if do_redact:
        text, answer = redact(text), redact(answer)
    return Row(line=line, text=text, timestamp=timestamp, answer=answer, **fields)


def detect_format(name: str, head: bytes) -> str:
    """'jsonl', 'csv' or 'tsv' from the file name, else from the first bytes."""
    lowered = name.lower()
    if lowered.endswith((".jsonl", ".ndjson", ".json")):
        return "jsonl"
    if lowered.endswith(".tsv"):
        return "tsv"
    if lowered.endswith(".csv"):
        return "csv"
    return "jsonl" if head.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"{") else "csv"


def _decode_head(head: bytes, complete: bool) -> str:
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise UnreadableFile("the file is UTF-16 encoded; save it as UTF-8 and upload it again")
    decoder = codecs.getincrementaldecoder("utf-8")("strict")
    try:
        # Not final unless the whole file is here: the 64 KB cut may fall inside a multi-byte character.
        return decoder.decode(head, final=complete).removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        line = head[: exc.start].count(b"\n") + 1
        raise UnreadableFile(
            f"the file is not UTF-8 (byte 0x{head[exc.start]:02x} on line {line} cannot be decoded); save it as UTF-8 and upload it again"
        ) from exc


def sniff(head: bytes, name: str, complete: bool = False) -> Sniff:
    """Check the first bytes of a file (``head``, up to ``SNIFF_BYTES``) before importing it.

    Args:
        head: the file's first bytes.
        name: the file name (its extension picks the format).
        complete: ``head`` is the whole file.

    Raises:
        UnreadableFile: with a message for the user, when the file cannot be imported at all.
    """
    text = _decode_head(head, complete)
    if not text.strip():
        raise UnreadableFile("the file is empty")
    fmt = detect_format(name, head)
    if fmt == "jsonl":
        first, newline, _ = text.lstrip().partition("\n")
        if not newline and not complete:
            return Sniff(fmt)  # a first line longer than the sniffed bytes: the rows will say
        try:
            record = json.loads(first)
        except json.JSONDecodeError as exc:
            hint = " (it looks like one JSON array; write one object per line instead)" if first.startswith("[") else ""
            raise UnreadableFile(f"the first line is not a JSON object: {exc.msg}{hint}") from exc
        if not isinstance(record, dict):
            raise UnreadableFile(f"the first line is a JSON {type(record).__name__}, not an object; write one JSON object per line")
        return Sniff(fmt, columns=sorted(str(k) for k in record))
    delimiter = "\t" if fmt == "tsv" else ","
    try:
        header = next(csv.reader(text.splitlines(), delimiter=delimiter), [])
    except csv.Error as exc:
        raise UnreadableFile(f"the CSV header cannot be read: {exc}") from exc
    columns = [c.strip() for c in header]
    if "text" not in {_canonical(c) for c in columns}:
        found = ", ".join(repr(c) for c in columns if c) or "none"
        raise UnreadableFile(
            f"the CSV has no 'text' column (columns found: {found}); name the column holding the queries "
            f"{' or '.join(repr(a) for a in TEXT_ALIASES)}"
        )
    return Sniff(fmt, columns=columns)


class _Lines:
    """The file's physical lines, decoded one by one; remembers which lines were bad and why."""

    def __init__(self, stream: IO[bytes]):
        self.stream = stream
        self.count = 0
        self.bad: dict[int, str] = {}

    def __iter__(self) -> Iterator[str]:
        while True:
            raw = self.stream.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            self.count += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                while (rest := self.stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                    pass
                self.bad[self.count] = f"the line is longer than {MAX_LINE_BYTES // 1024} KiB"
                yield "\n"
                continue
            if self.count == 1:
                raw = raw.removeprefix(codecs.BOM_UTF8)
            try:
                yield raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                self.bad[self.count] = f"not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
                yield raw.decode("utf-8", errors="replace")


def _iter_jsonl(lines: _Lines, do_redact: bool) -> Iterator[Row | RowError]:
    for line in lines:
        line_no = lines.count
        if line_no in lines.bad:
            yield RowError(line_no, lines.bad[line_no])
            continue
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            yield RowError(line_no, f"invalid JSON: {exc.msg}")
            continue
        except RecursionError:
            yield RowError(line_no, "invalid JSON: nested too deeply")
            continue
        if not isinstance(record, dict):
            yield RowError(line_no, "each line must be a JSON object")
            continue
        yield _clean(record, line_no, do_redact)


def _iter_csv(lines: _Lines, delimiter: str, do_redact: bool) -> Iterator[Row | RowError]:
    reader = csv.reader(iter(lines), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as exc:
        yield RowError(1, f"malformed CSV header: {exc}")
        return
    columns = [_canonical(h) for h in header]
    if "text" not in columns:
        yield RowError(1, "the CSV header has no 'text' column")
        return
    while True:
        start = lines.count + 1
        try:
            values = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield RowError(start, f"malformed CSV: {exc}")
            continue
        bad = [n for n in range(start, lines.count + 1) if n in lines.bad]
        if bad:
            yield RowError(start, lines.bad[bad[0]])
            continue
        if not any(v.strip() for v in values):
            continue
        if len(values) > len(columns):
            yield RowError(start, f"{len(values)} fields but the header has {len(columns)} (an unquoted delimiter in the text?)")
            continue
        yield _clean(dict(zip(columns, values, strict=False)), start, do_redact)


def iter_rows(stream: IO[bytes], fmt: str, do_redact: bool = False) -> Iterator[Row | RowError]:
    """Yield a ``Row`` or ``RowError`` per record, streaming (never loads the whole file).

    Line numbers are the file's physical lines, counting from 1 (a CSV header is line 1); a CSV
    record that spans several lines has the number of its first.
    """
    lines = _Lines(stream)
    if fmt == "jsonl":
        yield from _iter_jsonl(lines, do_redact)
    elif fmt in ("csv", "tsv"):
        yield from _iter_csv(lines, "\t" if fmt == "tsv" else ",", do_redact)
    else:
        raise ValueError(f"unknown format {fmt!r}")
