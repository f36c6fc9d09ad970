"""Property tests for the document parsers and file names: any bytes give documents or a ParseError, nothing else."""

from __future__ import annotations

import json
import re
import unicodedata

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from knowledge.parsers import ParseError, parse_bytes
from sbcommon.uploads import RESERVED_NAMES, safe_filename

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PREFIXES = [b"", b"%PDF-1.7\n", b"PK\x03\x04", b"<html><body>", b"{", b"\xef\xbb\xbf", b"\xff\xfe", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", b"# "]
NAMES = st.sampled_from(["a.txt", "a.md", "a.html", "a.pdf", "a.docx", "a.jsonl", "noext", "", "../x.txt", "CON"])
WORD = st.text(alphabet=st.characters(whitelist_categories=("Lu", "Ll", "Nd")), min_size=1, max_size=12)


@FAST
@given(prefix=st.sampled_from(PREFIXES), body=st.binary(max_size=2048), name=NAMES)
def test_any_bytes_give_documents_or_a_parse_error(prefix, body, name):
    try:
        parsed, refusal = parse_bytes(prefix + body, name), ""
    except ParseError as exc:
        parsed, refusal = None, str(exc)
    if parsed is None:
        assert refusal  # a message a person can act on
        return
    assert parsed.documents
    for document in parsed.documents:
        assert document.text.strip()
        assert "\x00" not in document.text


@FAST
@given(paragraphs=st.lists(st.lists(WORD, min_size=1, max_size=20), min_size=1, max_size=8))
def test_plain_text_round_trips_its_words_in_order(paragraphs):
    text = "\n\n".join(" ".join(words) for words in paragraphs)
    document = parse_bytes(text.encode("utf-8"), "notes.txt").documents[0]
    assert document.text.split() == text.split()


@FAST
@given(visible=st.lists(WORD, min_size=1, max_size=10), hidden=st.lists(WORD, min_size=1, max_size=5),
       handler=st.sampled_from(["onclick", "onerror", "onload", "onmouseover"]))
def test_html_keeps_its_text_and_loses_scripts_styles_and_handlers(visible, hidden, handler):
    secret = "zzq" + "".join(hidden)  # a marker that cannot occur in the visible words by chance
    page = (
        f"<html><head><title>t</title><script>var {secret} = 1;</script></head>"
        f"<body><p {handler}=\"steal('{secret}')\">{' '.join(visible)}</p>"
        f"<style>.{secret} {{}}</style><img src=x {handler}=\"{secret}()\"><svg><script>{secret}()</script></svg></body></html>"
    )
    document = parse_bytes(page.encode("utf-8"), "page.html").documents[0]
    assert secret not in document.text
    assert document.text.split()[-len(visible):] == visible


@FAST
@given(rows=st.lists(st.one_of(
    st.dictionaries(st.sampled_from(["text", "title", "id", "url", "metadata"]), st.one_of(st.text(max_size=40), st.integers(), st.none()), max_size=5),
    st.integers(), st.text(max_size=20),
), min_size=1, max_size=20))
def test_json_lines_give_one_document_or_one_error_per_non_blank_line(rows):
    lines = [json.dumps(row) for row in rows]
    data = ('{"text": "first line is a document"}\n' + "\n".join(lines)).encode()
    parsed = parse_bytes(data, "docs.jsonl")
    assert len(parsed.documents) + len(parsed.errors) == len(lines) + 1
    assert all(re.match(r"line \d+: ", error) for error in parsed.errors)


@FAST
@given(name=st.text(max_size=300))
def test_safe_filenames_have_no_path_controls_or_device_names(name):
    safe = safe_filename(name)
    assert safe
    assert len(safe) <= 101
    assert "/" not in safe
    assert "\\" not in safe
    assert not safe.startswith(".")
    assert not any(unicodedata.category(ch).startswith("C") for ch in safe)
    assert safe.split(".")[0].lower() not in RESERVED_NAMES
    assert safe_filename(safe) == safe  # idempotent: a stored name is already safe
