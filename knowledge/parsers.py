"""Turning uploaded files into documents: plain text, Markdown, HTML, PDF, Word (.docx) and JSON Lines.

A file's kind is read from its bytes, not its name (the name only breaks a tie between Markdown and
text): a binary renamed ``.txt`` is refused, HTML saved as ``.txt`` is still sanitised (nh3), and a
name promising a binary format the content is not is refused. Pure: bytes in, ``DocumentInput`` rows
out, ``ParseError`` with a sentence a person can act on.
"""

from __future__ import annotations

import codecs
import io
import json
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

from sbcommon.sanitize import clean_structure

SNIFF_BYTES = 8192
# 200,000 words of English are about 1.2 million characters; five million leaves room for manuals.
MAX_DOCUMENT_CHARS = 5_000_000
# A .docx is a ZIP: refuse one that would inflate past this (a "zip bomb"), whatever its own size.
MAX_UNCOMPRESSED_BYTES = 512 * 1024 * 1024
MAX_TITLE_CHARS = 500
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_HTML_HINT = re.compile(rb"<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<(?:div|p|h[1-6]|script|style|meta|title|table|ul|article)[\s>]", re.I)
_MD_HINT = re.compile(r"^(#{1,6}\s+\S|```|\s*[-*+]\s+\S.*$|\s*\d+\.\s+\S)", re.M)
_DROP_TAGS = ("script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "embed", "head")
_BLOCK_TAGS = (
    "p", "div", "section", "article", "main", "aside", "header", "footer", "nav", "blockquote", "pre", "table", "thead", "tbody",
    "tfoot", "tr", "ul", "ol", "dl", "dt", "dd", "figure", "figcaption", "form", "fieldset", "address", "hr", "details", "summary",
    "caption", "legend", "menu", "hgroup", "dialog", "center",
)
# Inline elements that stand apart on the page (a link list's title beside its description, buttons,
# labels, options): their text must not run into the next word ("GI Bill benefitsTransfer your ...").
_SEPARATE_INLINE = ("a", "button", "label", "option", "select", "input", "img")
# Marks an element's edge in the extracted text: a space where two words would otherwise touch, else nothing.
_EDGE = "\u2063"
_EDGE_BETWEEN_WORDS = re.compile(r"(?<=[\w.!?:;,)\]%])\u2063+(?=[\w(\[$\"\u201c])")


class ParseError(ValueError):
    """A file that cannot be turned into documents; the message says why, for the person who sent it."""


@dataclass
class DocumentInput:
    """A parsed document ready to store."""

    external_id: str
    title: str
    text: str
    url: str = ""
    metadata: dict[str, Any] | None = None


@dataclass
class ParsedFile:
    """What one file gave: its kind, its documents, and the lines it skipped (JSON Lines only)."""

    kind: str
    documents: list[DocumentInput]
    errors: list[str] = field(default_factory=list)


# --- sniffing ------------------------------------------------------------------------------------

def _is_zip_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return "word/document.xml" in archive.namelist()
    except zipfile.BadZipFile:
        return False


def _looks_binary(head: bytes) -> bool:
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13))
    return controls > max(1, len(head) // 100)


def decode_text(data: bytes) -> str:
    """Text from bytes: UTF-8 (with or without BOM), UTF-16 with a BOM, else Windows-1252; binary is refused."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise ParseError("the file claims to be UTF-16 text but is not") from exc
    if _looks_binary(data[: SNIFF_BYTES * 8]):
        raise ParseError("this is a binary file, not text, HTML, PDF or a Word document")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Legacy 8-bit text (Windows "ANSI"): every byte maps to a character; control bytes were ruled out above.
        return data.decode("cp1252", errors="replace")


# Extensions that promise a binary format: content of another kind under these names is refused.
_BINARY_SUFFIXES = {".pdf": "pdf", ".docx": "docx"}


def sniff(data: bytes, filename: str = "", complete: bool = True) -> str:
    """The kind of file ``data`` is (text, markdown, html, pdf, docx or jsonl), from its content; ``ParseError`` if none.

    With ``complete=False`` ``data`` is only the file's first bytes: a ZIP is then taken for a
    .docx until the whole file is parsed.
    """
    kind = _sniff_content(data, filename, complete)
    suffix = PurePath(filename).suffix.lower()
    promised = _BINARY_SUFFIXES.get(suffix)
    if promised is not None and kind != promised:
        what = {"text": "plain text", "markdown": "Markdown text", "html": "an HTML page", "jsonl": "JSON Lines", "pdf": "a PDF", "docx": "a Word document"}[kind]
        raise ParseError(f"the file is named {suffix} but its content is {what}; rename it to match what it holds")
    return kind


def _sniff_content(data: bytes, filename: str, complete: bool) -> str:
    head = data[:SNIFF_BYTES]
    if not data or (complete and not data.strip()):
        raise ParseError("the file is empty")
    if head.startswith(b"%PDF-"):
        return "pdf"
    if head.startswith(b"PK\x03\x04"):
        if not complete or _is_zip_docx(data):
            return "docx"
        raise ParseError("this is a ZIP archive, not a Word (.docx) document; upload its files one by one")
    if head.startswith(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"):
        raise ParseError("old Office formats (.doc, .xls, .ppt) are not supported; save the file as .docx or PDF")
    if head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        # Only the head, leniently: a check of the first bytes may cut a surrogate pair, and the
        # whole file is decoded strictly once, when it is parsed.
        text_head = head.decode("utf-16", errors="ignore")
    else:
        if _looks_binary(head):
            raise ParseError("this is a binary file, not text, HTML, PDF or a Word document")
        text_head = head.decode("utf-8", errors="ignore").lstrip("\ufeff")
    stripped = text_head.lstrip()
    if stripped.startswith("{"):
        first = stripped.split("\n", 1)[0].strip()
        try:
            if isinstance(json.loads(first), dict):
                return "jsonl"
        except ValueError:
            pass
    if _HTML_HINT.search(text_head.encode("utf-8", errors="ignore")) and stripped.startswith("<"):
        return "html"
    suffix = PurePath(filename).suffix.lower()
    if suffix in (".md", ".markdown", ".mdown") or (suffix not in (".txt", ".text") and _MD_HINT.search(text_head)):
        return "markdown"
    return "text"


# --- parsing -------------------------------------------------------------------------------------

def _clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\u00a0", " ")
    text = _CONTROL.sub("", text)
    lines = [re.sub(r"[ \t\f\v]+", " ", line).strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _first_line_title(text: str, fallback: str) -> str:
    for line in text.split("\n"):
        line = line.strip().lstrip("#").strip()
        if line:
            return line[:120] if len(line) <= 120 else fallback
    return fallback


def _stem(filename: str) -> str:
    return PurePath(filename).stem or filename or "document"


def parse_text(text: str, filename: str) -> tuple[str, str]:
    """(title, text) of a plain-text file: the title is the first line when it is short."""
    text = _clean(text)
    return _first_line_title(text, _stem(filename)), text


_ACTIVE_BLOCKS = re.compile(r"<(script|style|iframe|object|embed|template|noscript)\b[^>]*>.*?(?:</\1\s*>|\Z)", re.S | re.I)
_MD_FRONT_MATTER = re.compile(r"\A---\n(.*?)\n---\n", re.S)


def parse_markdown(text: str, filename: str) -> tuple[str, str, dict[str, str]]:
    """(title, text, front matter) of Markdown: links and images become their text, emphasis marks go, headings stay."""
    text = text.replace("\r\n", "\n")
    meta: dict[str, str] = {}
    match = _MD_FRONT_MATTER.match(text)
    if match:
        for line in match.group(1).split("\n"):
            key, sep, value = line.partition(":")
            if sep and key.strip():
                meta[key.strip().lower()] = value.strip().strip("\"'")
        text = text[match.end():]
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", text)  # images: their alt text
    text = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", text)  # links: their text
    text = _ACTIVE_BLOCKS.sub("", text)  # inline scripts and styles go with their content
    text = re.sub(r"<[^>\n]+>", "", text)  # inline HTML tags
    text = re.sub(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1", r"\2", text)
    text = re.sub(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?!\w)", r"\1", text)
    text = re.sub(r"`([^`\n]+)`", r"\1", text)
    text = re.sub(r"^```.*$", "", text, flags=re.M)
    text = re.sub(r"^\s*([-*_]\s*){3,}$", "", text, flags=re.M)  # horizontal rules
    text = _clean(text)
    title = meta.get("title") or next((line.lstrip("#").strip() for line in text.split("\n") if re.match(r"#\s+\S", line)), "")
    return title or _first_line_title(text, _stem(filename)), text, meta


def parse_html(html: str, filename: str) -> tuple[str, str, str]:
    """(title, text, canonical URL) of an HTML page: scripts, styles and other non-content elements removed."""
    from bs4 import BeautifulSoup, Comment

    soup = BeautifulSoup(html, "lxml")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    canonical = soup.find("link", rel="canonical")
    url = str(canonical.get("href") or "") if canonical else ""
    if not url.startswith(("http://", "https://")):  # Open Graph's og:url names the page too
        og = soup.find("meta", attrs={"property": "og:url"})
        url = str(og.get("content") or "") if og else url
    # Edges nh3 would lose with the tags it strips (forms, details, links' neighbours), marked in the text first.
    body = soup.body or soup
    for tag in body.find_all(_SEPARATE_INLINE):
        tag.insert_before(_EDGE)
        tag.insert_after(_EDGE)
    for tag in body.find_all(_BLOCK_TAGS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    # nh3 next: scripts, styles, event handlers and embeds go with their content; the structure stays.
    soup = BeautifulSoup(clean_structure(str(body)), "lxml")
    for tag in soup(_DROP_TAGS):
        tag.decompose()
    for comment in soup.find_all(string=lambda s: isinstance(s, Comment)):
        comment.extract()
    for level in range(1, 7):
        for tag in soup.find_all(f"h{level}"):
            heading = " ".join(tag.get_text(" ", strip=True).split())
            if not title and level == 1:
                title = heading
            tag.replace_with(f"\n\n{'#' * level} {heading}\n\n" if heading else "")
    for tag in soup.find_all("br"):
        tag.replace_with("\n")
    for tag in soup.find_all("li"):
        tag.insert_before("\n- ")
        tag.insert_after("\n")
    for tag in soup.find_all(["td", "th"]):
        tag.insert_after(" | ")
    for tag in soup.find_all(_BLOCK_TAGS):
        tag.insert_before("\n\n")
        tag.insert_after("\n\n")
    text = _clean(_EDGE_BETWEEN_WORDS.sub(" ", soup.get_text("")).replace(_EDGE, ""))
    text = re.sub(r"(\s*\|\s*)+\n", "\n", text)
    return title or _first_line_title(text, _stem(filename)), text, url if url.startswith(("http://", "https://")) else ""


def parse_pdf(data: bytes, filename: str) -> tuple[str, str, dict[str, Any]]:
    """(title, text, metadata) of a PDF, page by page; a damaged, encrypted or image-only PDF is refused."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
        if reader.is_encrypted and not reader.decrypt(""):
            raise ParseError("the PDF is encrypted; upload a copy without a password")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        meta_title = str(info.title or "").strip() if info else ""
    except ParseError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, IndexError, OSError, RecursionError, AssertionError, zlib.error) as exc:
        raise ParseError(f"the PDF is damaged and cannot be read ({exc.__class__.__name__}: {str(exc)[:120]})") from exc
    text = _clean("\n\n".join(pages))
    if not text:
        raise ParseError("the PDF has no text layer (scanned pages need OCR first)")
    return meta_title[:MAX_TITLE_CHARS] or _first_line_title(text, _stem(filename)), text, {"pages": len(pages)}


def parse_docx(data: bytes, filename: str) -> tuple[str, str]:
    """(title, text) of a Word document: headings become Markdown-style headings, tables become rows of cells."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        if sum(info.file_size for info in archive.infolist()) > MAX_UNCOMPRESSED_BYTES:
            raise ParseError("the Word document inflates to more than 512 MB; refusing it")
    import docx

    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:  # PackageNotFoundError, KeyError, a bad ZIP, lxml's XMLSyntaxError: a damaged part
        raise ParseError(f"the Word document is damaged and cannot be read ({exc.__class__.__name__})") from exc
    lines: list[str] = []
    title = (document.core_properties.title or "").strip()
    for paragraph in document.paragraphs:
        text = paragraph.text.strip()
        if not text:
            continue
        style = (paragraph.style.name if paragraph.style is not None else "") or ""
        if style == "Title":
            title = title or text
            lines.append(f"# {text}")
        elif style.startswith("Heading"):
            level = int(style.split()[-1]) if style.split()[-1].isdigit() else 1
            lines.append(f"{'#' * min(level, 6)} {text}")
        else:
            lines.append(text)
        lines.append("")
    for table in document.tables:
        for row in table.rows:
            cells = [cell.text.strip() for cell in row.cells]
            if any(cells):
                lines.append(" | ".join(cells))
        lines.append("")
    text = _clean("\n".join(lines))
    return title[:MAX_TITLE_CHARS] or _first_line_title(text, _stem(filename)), text


def parse_jsonl(text: str, filename: str) -> tuple[list[DocumentInput], list[str]]:
    """One document per line: ``text`` (required), ``title``, ``url``, ``metadata``, ``id`` (optional).

    A document's id is its ``id``, else its ``url``, else ``<file name>:<line>``. Bad lines are
    skipped and reported by number.
    """
    documents: list[DocumentInput] = []
    errors: list[str] = []
    seen: set[str] = set()
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            errors.append(f"line {number}: not JSON ({exc.msg})")
            continue
        if not isinstance(row, dict):
            errors.append(f"line {number}: not a JSON object")
            continue
        body = row.get("text")
        if not isinstance(body, str) or not body.strip():
            errors.append(f"line {number}: 'text' is missing or empty")
            continue
        metadata = row.get("metadata") or {}
        if not isinstance(metadata, dict):
            errors.append(f"line {number}: 'metadata' must be an object")
            continue
        url = row.get("url") or ""
        external = str(row.get("id") or row.get("doc_id") or url or f"{filename}:{number}")[:255]
        if external in seen:
            errors.append(f"line {number}: id {external!r} repeats an earlier line")
            continue
        seen.add(external)
        body = _clean(body)
        title = str(row.get("title") or "").strip() or _first_line_title(body, external)
        documents.append(DocumentInput(external_id=external, title=title[:MAX_TITLE_CHARS], text=body, url=str(url)[:1000] if str(url).startswith(("http://", "https://")) else "", metadata=metadata))
    return documents, errors


def parse_bytes(data: bytes, filename: str, external_id: str | None = None, max_chars: int = MAX_DOCUMENT_CHARS) -> ParsedFile:
    """Parse one file into documents.

    Args:
        data: the file's bytes.
        filename: its (already sanitised) name, used for titles, ids and the Markdown/text tie.
        external_id: the id of the document a single-document file becomes (default: the file name).
        max_chars: documents longer than this are refused with a message saying so.

    Raises:
        ParseError: the file is empty, of an unsupported kind, damaged, or holds no text.
    """
    kind = sniff(data, filename)
    external_id = (external_id or filename)[:255]
    metadata: dict[str, Any] = {"source_file": filename, "kind": kind}
    url = ""
    errors: list[str] = []
    if kind == "pdf":
        title, text, extra = parse_pdf(data, filename)
        metadata.update(extra)
    elif kind == "docx":
        title, text = parse_docx(data, filename)
    else:
        raw = decode_text(data)
        if kind == "jsonl":
            documents, errors = parse_jsonl(raw, filename)
            for document in documents:
                _check_length(document.text, max_chars, f"{filename} ({document.external_id})")
                document.metadata = {**metadata, **(document.metadata or {})}
            if not documents:
                raise ParseError("no usable line in this JSON Lines file: " + "; ".join(errors[:3]))
            return ParsedFile(kind, documents, errors)
        if kind == "html":
            title, text, url = parse_html(raw, filename)
        elif kind == "markdown":
            title, text, front = parse_markdown(raw, filename)
            url = front.get("url", "") if front.get("url", "").startswith(("http://", "https://")) else ""
        else:
            title, text = parse_text(raw, filename)
    if not text.strip():
        raise ParseError("the file holds no text")
    _check_length(text, max_chars, filename)
    return ParsedFile(kind, [DocumentInput(external_id=external_id, title=title[:MAX_TITLE_CHARS], text=text, url=url, metadata=metadata)], errors)


def _check_length(text: str, max_chars: int, what: str) -> None:
    if len(text) > max_chars:
        raise ParseError(f"{what} is {len(text):,} characters long; the limit is {max_chars:,} (split it into several documents)")


