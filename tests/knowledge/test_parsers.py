"""Turning files into documents: kinds are read from content, bad files are refused with a reason."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from knowledge.ml.chunking import chunk_text
from knowledge.parsers import ParseError, parse_bytes, sniff
from sbcommon.uploads import safe_filename

from .conftest import make_docx, make_pdf


def only(parsed):
    assert len(parsed.documents) == 1
    return parsed.documents[0]


def test_plain_text_keeps_its_paragraphs_and_takes_its_first_line_as_title():
    doc = only(parse_bytes(b"Renewing a licence\r\n\r\nYou can renew online.\r\nIt takes ten minutes.", "renew.txt"))

    assert doc.title == "Renewing a licence"
    assert doc.text == "Renewing a licence\n\nYou can renew online.\nIt takes ten minutes."
    assert doc.external_id == "renew.txt"
    assert doc.metadata == {"source_file": "renew.txt", "kind": "text"}


def test_markdown_loses_its_markup_but_keeps_its_headings():
    source = b"---\ntitle: Licences\nurl: https://dmv.example.gov/licences\n---\n# Renewals\n\nRenew **online** via [the portal](https://x.example).\n\n## Fees\n\n`$25`\n"
    parsed = parse_bytes(source, "licences.md")
    doc = only(parsed)

    assert parsed.kind == "markdown"
    assert doc.title == "Licences"
    assert doc.url == "https://dmv.example.gov/licences"
    assert doc.text == "# Renewals\n\nRenew online via the portal.\n\n## Fees\n\n$25"


def test_html_is_stripped_of_scripts_styles_and_comments():
    page = b"""<!doctype html><html><head><title>Licence renewal</title><style>body{color:red}</style>
    <script>document.write('tracking')</script><link rel="canonical" href="https://dmv.example.gov/renew"></head>
    <body><script src="x.js"></script><noscript>enable js</noscript><!-- secret comment -->
    <h1>Renew your licence</h1><p>Renew online up to <b>six months</b> early.</p>
    <ul><li>Bring your old licence</li><li>Pay the fee</li></ul><script>alert('evil')</script></body></html>"""
    doc = only(parse_bytes(page, "renew.html"))

    assert doc.title == "Licence renewal"
    assert doc.url == "https://dmv.example.gov/renew"
    for junk in ("tracking", "evil", "color:red", "enable js", "secret comment", "<"):
        assert junk not in doc.text
    assert doc.text == "# Renew your licence\n\nRenew online up to six months early.\n\n- Bring your old licence\n\n- Pay the fee"


def test_a_page_made_of_scripts_only_holds_no_text():
    with pytest.raises(ParseError, match="holds no text"):
        parse_bytes(b"<html><head><script>" + b"var a = 1;" * 1000 + b"</script></head><body><script>x()</script></body></html>", "app.html")


def test_html_link_titles_do_not_run_into_their_descriptions():
    page = (b'<html><body><ul><li><a href="/transfer"><b>Transfer Post-9/11 GI Bill benefits</b></a><span>Transfer your unused benefits.'
            b'</span></li></ul><div><a href="/a">Apply</a><a href="/b">Track</a> or read (<a href="/c">the guide</a>), <a href="/d">VA</a>'
            b"'s page.</div><details><summary>More</summary>Other programs</details><label>Name</label><button>Go</button></body></html>")
    doc = only(parse_bytes(page, "education.html"))

    assert doc.text == ("- Transfer Post-9/11 GI Bill benefits Transfer your unused benefits.\n\n"
                        "Apply Track or read (the guide), VA's page.\n\nMore\n\nOther programs\n\nName Go")


def test_og_url_names_the_page_when_there_is_no_canonical_link():
    page = b'<html><head><meta property="og:url" content="https://www.va.gov/education/"></head><body><p>Hello</p></body></html>'

    assert only(parse_bytes(page, "education.html")).url == "https://www.va.gov/education/"


def test_html_saved_as_txt_is_still_parsed_as_html():
    assert parse_bytes(b"<html><body><p>Hello</p><script>bad()</script></body></html>", "page.txt").kind == "html"


def test_a_pdf_gives_its_text_page_by_page():
    parsed = parse_bytes(make_pdf("Veterans benefits\nApply online at va.gov"), "benefits.pdf")
    doc = only(parsed)

    assert parsed.kind == "pdf"
    assert "Veterans benefits" in doc.text
    assert "Apply online at va.gov" in doc.text
    assert doc.title == "Veterans benefits"
    assert doc.metadata["pages"] == 1


def test_a_corrupt_pdf_is_refused_with_a_reason():
    broken = make_pdf("Hello")[:60] + b"\x00garbage" * 20

    with pytest.raises(ParseError, match=r"^the PDF (is damaged|has no text layer)"):
        parse_bytes(broken, "broken.pdf")


def test_a_docx_keeps_headings_and_its_title():
    data = make_docx("Student aid guide", [("Heading 1", "Applying"), ("Normal", "Fill in the FAFSA form."), ("Heading 2", "Deadlines"), ("Normal", "Apply by June 30.")])
    parsed = parse_bytes(data, "guide.docx")
    doc = only(parsed)

    assert parsed.kind == "docx"
    assert doc.title == "Student aid guide"
    assert doc.text == "# Applying\n\nFill in the FAFSA form.\n\n## Deadlines\n\nApply by June 30."


def test_a_zip_that_is_not_a_word_document_is_refused():
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("notes.txt", "hello")

    with pytest.raises(ParseError, match="ZIP archive, not a Word"):
        parse_bytes(buffer.getvalue(), "notes.docx")


def test_old_office_files_are_refused_with_advice():
    with pytest.raises(ParseError, match=r"save the file as \.docx or PDF"):
        parse_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 600, "old.doc")


def test_json_lines_give_one_document_per_line_and_report_bad_lines():
    lines = [
        {"id": "renew", "title": "Renew", "text": "Renew online.", "url": "https://dmv.example.gov/renew", "metadata": {"lang": "en"}},
        {"title": "No id", "text": "Replace a lost licence."},
        {"title": "Empty", "text": "  "},
        {"id": "renew", "text": "A repeated id."},
    ]
    source = "\n".join(json.dumps(r) for r in lines) + "\nnot json\n"
    parsed = parse_bytes(source.encode(), "docs.jsonl")

    assert parsed.kind == "jsonl"
    assert [(d.external_id, d.title, d.url) for d in parsed.documents] == [
        ("renew", "Renew", "https://dmv.example.gov/renew"), ("docs.jsonl:2", "No id", ""),
    ]
    assert parsed.documents[0].metadata == {"source_file": "docs.jsonl", "kind": "jsonl", "lang": "en"}
    assert parsed.errors == ["line 3: 'text' is missing or empty", "line 4: id 'renew' repeats an earlier line", "line 5: not JSON (Expecting value)"]


@pytest.mark.parametrize("content", [b"", b"   \n\t\n"])
def test_an_empty_file_is_refused(content):
    with pytest.raises(ParseError, match="the file is empty"):
        parse_bytes(content, "empty.txt")


def test_a_binary_renamed_txt_is_refused():
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 4

    with pytest.raises(ParseError, match="binary file"):
        parse_bytes(png, "photo.txt")


def test_sniffing_reads_content_not_the_name():
    assert sniff(b"%PDF-1.7 ...", "notes.txt") == "pdf"
    assert sniff(b'{"text": "a"}\n', "data.txt") == "jsonl"
    assert sniff(b"# Heading\n\n- item", "readme") == "markdown"
    assert sniff(b"# not markdown in a .txt\n", "notes.txt") == "text"


def test_legacy_8_bit_text_is_read():
    assert only(parse_bytes("Caf\u00e9 opening hours".encode("cp1252"), "cafe.txt")).text == "Caf\u00e9 opening hours"


def test_a_200000_word_document_is_parsed_and_chunked():
    paragraph = " ".join(f"Sentence {i} about licences and renewals." for i in range(40))
    words_per_paragraph = len(paragraph.split())
    text = "\n\n".join([paragraph] * (200_000 // words_per_paragraph + 1))
    doc = only(parse_bytes(text.encode(), "manual.txt"))
    chunks = chunk_text(doc.text, size=1000, overlap=150)

    assert len(doc.text.split()) >= 200_000
    assert len(chunks) > 1000
    assert max(len(c.text) for c in chunks) <= 1000
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_a_document_over_the_character_limit_is_refused_clearly():
    with pytest.raises(ParseError, match=r"manual.txt is 1,999 characters long; the limit is 1,000"):
        parse_bytes(b"a " * 1000, "manual.txt", max_chars=1000)


@pytest.mark.parametrize(("raw", "safe"), [
    ("../../etc/passwd", "passwd"),
    ("..\\..\\windows\\system.ini", "system.ini"),
    ("/var/www/../../.bashrc", "bashrc"),
    ("my report (final).pdf", "my_report_final_.pdf"),
    ("...", "document"),
    ("", "document"),
])
def test_file_names_are_sanitised(raw, safe):
    assert safe_filename(raw) == safe


def test_a_utf16_file_whose_head_cuts_a_surrogate_pair_is_still_accepted():
    """The upload check reads only the first bytes; an emoji split at that cut must not refuse a valid file."""
    from knowledge.parsers import SNIFF_BYTES, parse_bytes, sniff

    data = ("a" * (SNIFF_BYTES // 2 - 2) + "\N{GRINNING FACE}" + "b" * 100).encode("utf-16")

    assert sniff(data[:SNIFF_BYTES], "notes.txt", complete=False) == sniff(data, "notes.txt")
    assert "\N{GRINNING FACE}" in parse_bytes(data, "notes.txt").documents[0].text
