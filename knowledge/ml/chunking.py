"""Chunking that respects headings, paragraphs and sentences (``chunk_text``).

By paragraphs (the default): blocks (a heading starts a new chunk) longer than the target are split at
sentences and packed into chunks of about ``size`` characters, sharing up to ``overlap`` characters of
whole sentences. By sections (``sections=True``): the text is cut at its headings (Markdown ``#`` lines
and short lines opening a paragraph) and a chunk never spans two sections, except that one shorter
than ``min_section`` is packed with the next; each chunk carries its heading path for
``section_title`` ("Document — Section"), and the heading line leaves its text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADING = re.compile(r"^(#{1,6}\s+.+|[A-Z][^\n.!?]{0,80})$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_MD_HEADING = re.compile(r"^(#{1,6})\s+(.+?)(?:\s+#+)?\s*$")
_NUMBERING = re.compile(r"^(?:\d{1,2}[.)]|[IVX]{1,4}\.|[A-Z][.)])\s+")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s")
_BULLET = re.compile(r"^\s*[-*+•]\s")
# A line ending in one of these words was cut mid-sentence (wrapped text, a PDF's lines), not a heading.
_CONTINUES = frozenset("a an and are as at be by for from in into is of on or our the their to with your".split())
PLAIN_HEADING_LEVEL = 7  # a plain-text heading sits below any Markdown level
# Sections shorter than this are packed with the next one; a section that is only a heading always is.
# Chosen on doc2dial's validation split (docs/EVALUATIONS.md, "Tuned constants").
MIN_SECTION_CHARS = 0
# Documents are chunked by their sections (``sections=True``), each chunk titled "Document — Section".
# Chosen on the same split; a change applies to documents indexed afterwards (rebuild to re-chunk).
CHUNK_BY_SECTIONS = True
MAX_QUESTION_HEADING_CHARS = 250


@dataclass
class Chunk:
    """A piece of a document with its position and section heading (``path``: the headings above it, outermost first)."""

    text: str
    position: int
    start: int
    heading: str = ""
    path: tuple[str, ...] = field(default_factory=tuple)


def _is_heading(line: str) -> bool:
    line = line.strip()
    if line.startswith("#"):
        return bool(_HEADING.match(line))
    return 0 < len(line) <= 80 and bool(_HEADING.match(line)) and not line.endswith((".", "?", "!", ",", ":", ";"))


def _blocks(text: str) -> list[tuple[int, str, bool]]:
    """(offset, block text, is_heading) for each paragraph, in order; a heading line opening a paragraph is its own block."""
    out = []
    for match in re.finditer(r"[^\n]+(?:\n(?!\s*\n)[^\n]+)*", text):
        block = match.group(0)
        if not block.strip():
            continue
        first, _, rest = block.partition("\n")
        if _is_heading(first):
            out.append((match.start(), first.strip(), True))
            if rest.strip():
                out.append((match.start() + len(first) + 1, rest.strip(), False))
        else:
            out.append((match.start(), block.strip(), False))
    return out


def _sentences(block: str, size: int) -> list[str]:
    pieces = [s.strip() for s in _SENTENCE.split(block) if s.strip()]
    out: list[str] = []
    for piece in pieces:
        while len(piece) > size:  # a run-on "sentence": cut at the last space before the limit
            cut = piece.rfind(" ", 0, size)
            cut = cut if cut > size // 2 else size
            out.append(piece[:cut].strip())
            piece = piece[cut:].strip()
        if piece:
            out.append(piece)
    return out


def _check(size: int, overlap: int) -> None:
    if size < 100:
        raise ValueError("chunk size must be at least 100 characters")
    if not 0 <= overlap < size // 2:
        raise ValueError("chunk overlap must be between 0 and half the chunk size")


def chunk_text(text: str, size: int = 1000, overlap: int = 150, *, sections: bool = False, min_section: int = MIN_SECTION_CHARS) -> list[Chunk]:
    """Split ``text`` into chunks of about ``size`` characters with ``overlap`` characters of context.

    Args:
        text: the document's text.
        size: the target chunk length in characters (at least 100).
        overlap: characters of whole sentences repeated from the previous chunk (under half of ``size``).
        sections: cut at the text's headings first and keep each chunk inside one section (see the
            module's docstring); a text without headings is one section.
        min_section: with ``sections``, a section shorter than this is packed with the next one.
    """
    _check(size, overlap)
    if sections:
        return _chunk_sections(text, size, overlap, max(0, int(min_section)))
    chunks: list[Chunk] = []
    heading = ""
    current: list[str] = []
    current_start = 0
    current_heading = ""

    def flush() -> list[str]:
        if not current:
            return []
        body = "\n".join(current).strip()
        chunks.append(Chunk(text=body, position=len(chunks), start=current_start, heading=current_heading, path=(current_heading,) if current_heading else ()))
        tail: list[str] = []  # whole sentences from the end, up to `overlap` characters
        for sentence in reversed(_SENTENCE.split(current[-1])):
            if sum(len(t) for t in tail) + len(sentence) > overlap:
                break
            tail.insert(0, sentence)
        return [" ".join(tail)] if tail else []

    for offset, block, is_heading in _blocks(text):
        if is_heading:
            if current and any(len(c) for c in current):
                flush()
            current, heading = [], block.lstrip("#").strip()
            current_start, current_heading = offset, heading
            current.append(block)
            continue
        for sentence in _sentences(block, size) if len(block) > size else [block]:
            if current and sum(len(c) + 1 for c in current) + len(sentence) > size:
                carry = flush()
                current = carry
                current_start, current_heading = offset, heading
            if not current:
                current_start, current_heading = offset, heading
            current.append(sentence)
    if current:
        flush()
    return chunks


# --- by sections ----------------------------------------------------------------------------------

def heading_level(line: str, body: str = "") -> int:
    """The heading level of ``line`` (1-6: Markdown ``#``; 7: a plain-text heading), or 0 when it is not one.

    A plain-text heading is a short line opening a paragraph: it starts with a capital (after an
    optional "1." or "A)"), does not end a sentence with a full stop or a comma, and does not end
    on a word that continues on the next line. A question or a line ending in ":" counts only when
    text follows it in the same paragraph (``body``: the FAQ shape), and a line followed by a
    lower-case continuation is a wrapped sentence, not a heading.
    """
    line = line.strip()
    match = _MD_HEADING.match(line)
    if match:
        return len(match.group(1))
    if not line or _BULLET.match(line) or line.endswith((".", ",", ";", "!")):
        return 0
    if _NUMBERING.match(line) and (not body.strip() or _LIST_ITEM.match(body)):
        return 0  # an item of a numbered list; "1. Title" opening a paragraph of text is a heading
    words = _NUMBERING.sub("", line)
    if not words[:1].isupper() and not words[:1].isdigit():
        return 0
    last = words.rstrip("?:").split()[-1:]
    if last and last[0].lower() in _CONTINUES:
        return 0
    body = body.lstrip()
    if body[:1].islower():
        return 0
    if line.endswith("?"):
        return PLAIN_HEADING_LEVEL if body and len(line) <= MAX_QUESTION_HEADING_CHARS else 0
    if line.endswith(":"):
        return PLAIN_HEADING_LEVEL if body and len(line) <= 80 else 0
    return PLAIN_HEADING_LEVEL if len(line) <= (120 if body else 80) and len(words.split()) <= 16 else 0


@dataclass
class _Section:
    heading: str
    level: int
    path: tuple[str, ...]
    start: int
    paragraphs: list[tuple[int, str]] = field(default_factory=list)

    @property
    def length(self) -> int:
        return len(self.heading) + sum(len(p) + 2 for _, p in self.paragraphs)


def _paragraphs(text: str) -> list[tuple[int, str]]:
    """(offset, line) for each non-blank line, with paragraph breaks as ``(offset, "")``."""
    out: list[tuple[int, str]] = []
    offset = 0
    for line in text.split("\n"):
        out.append((offset, line.strip()))
        offset += len(line) + 1
    return out


def split_sections(text: str) -> list[_Section]:
    """The text's sections in order: each heading's paragraphs until the next heading (text before the first heading: heading "")."""
    sections = [_Section(heading="", level=0, path=(), start=0)]
    stack: list[tuple[int, str]] = []
    lines = _paragraphs(text)
    paragraph: list[str] = []
    paragraph_start = 0
    opens_paragraph = True

    def end_paragraph() -> None:
        if paragraph:
            sections[-1].paragraphs.append((paragraph_start, "\n".join(paragraph)))
            paragraph.clear()

    for i, (offset, line) in enumerate(lines):
        if not line:
            end_paragraph()
            opens_paragraph = True
            continue
        markdown = _MD_HEADING.match(line)
        level = 0
        if markdown:
            level = len(markdown.group(1))
        elif opens_paragraph:
            following = lines[i + 1][1] if i + 1 < len(lines) else ""
            level = heading_level(line, following)
        if level:
            end_paragraph()
            title = markdown.group(2).strip() if markdown else line
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append(_Section(heading=title, level=level, path=tuple(t for _, t in stack), start=offset))
            opens_paragraph = True
            continue
        if not paragraph:
            paragraph_start = offset
        paragraph.append(line)
        opens_paragraph = False
    end_paragraph()
    return [s for s in sections if s.heading or s.paragraphs]


def _group(sections: list[_Section], size: int, min_section: int) -> list[list[_Section]]:
    """Sections packed into chunk groups: one each, but a short one (under ``min_section``, or only a
    heading) goes with the next; a heading with nothing under it whose next section is its
    subsection is left out (it is in that section's path)."""
    kept = [s for i, s in enumerate(sections)
            if s.paragraphs or not (i + 1 < len(sections) and sections[i + 1].level > s.level and s.heading in sections[i + 1].path)]
    groups: list[list[_Section]] = []
    for section in kept:
        if groups:
            last = groups[-1]
            if not any(s.paragraphs for s in last) or sum(s.length for s in last) < min_section:
                last.append(section)
                continue
        groups.append([section])
    if len(groups) > 1:
        tail = sum(s.length for s in groups[-1])
        if not any(s.paragraphs for s in groups[-1]) or (tail < min_section and tail + groups[-2][-1].length <= size):
            groups[-2].extend(groups.pop())
    return groups


@dataclass
class _Unit:
    owner: _Section  # the section whose heading titles a chunk starting here
    start: int
    text: str
    joiner: str  # put before ``text`` inside a chunk: " " within a paragraph, "\n" after a heading line, else a blank line
    own_heading: bool = False  # the owner's heading line: left out of a chunk it opens (it is the chunk's title)
    heading: bool = False


def _units(group: list[_Section], size: int) -> list[_Unit]:
    units: list[_Unit] = []
    for i, section in enumerate(group):
        owner = section if section.paragraphs else next((s for s in group[i + 1 :] if s.paragraphs), section)
        if section.heading:
            units.append(_Unit(owner, section.start, section.heading, "\n\n", own_heading=owner is section, heading=True))
        for j, (offset, paragraph) in enumerate(section.paragraphs):
            pieces = _sentences(paragraph, size) if len(paragraph) > size else [paragraph]
            joiner = "\n" if (section.heading and j == 0) else "\n\n"
            units.extend(_Unit(section, offset, piece, joiner if k == 0 else " ") for k, piece in enumerate(pieces))
    return units


def _chunk_sections(text: str, size: int, overlap: int, min_section: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    for group in _group(split_sections(text), size, min_section):
        chunks.extend(_pack(_units(group, size), size, overlap, first_position=len(chunks)))
    return chunks


def _pack(units: list[_Unit], size: int, overlap: int, first_position: int) -> list[Chunk]:
    """Units packed greedily into chunks of about ``size``; a chunk is titled by the owner of its first
    new unit, starts with up to ``overlap`` characters of the previous chunk's last units unless it
    opens a section, and never ends on a heading line (the line moves to the next chunk)."""
    out: list[Chunk] = []

    def emit(current: list[_Unit], carried: int) -> None:
        new = current[carried:]
        prefix = [] if new[0].heading else current[:carried]
        kept = new[1:] if new[0].own_heading else new
        body = "".join(u.joiner + u.text for u in prefix + kept).strip() or new[0].text
        owner = new[0].owner
        out.append(Chunk(text=body, position=first_position + len(out), start=new[0].start, heading=owner.heading, path=owner.path))

    current: list[_Unit] = []  # the carried overlap first, then the new units
    carried = 0
    for unit in units:
        length = sum(len(u.text) + len(u.joiner) for u in current)
        # A chunk holding only heading lines waits for their text, even past ``size``.
        if not all(u.heading for u in current[carried:]) and length + len(unit.text) + len(unit.joiner) > size:
            moved: list[_Unit] = []
            while len(current) > carried + 1 and current[-1].heading:
                moved.insert(0, current.pop())
            emit(current, carried)
            tail: list[_Unit] = []  # whole units from the end, up to `overlap` characters
            for previous in reversed(current[carried:] if not moved else []):
                if sum(len(u.text) for u in tail) + len(previous.text) > overlap:
                    break
                tail.insert(0, previous)
            current, carried = tail + moved, len(tail)
        current.append(unit)
    if len(current) > carried:
        emit(current, carried)
    return out


_LINK_MARKER = re.compile(r"\s*\[\s*\d+\s*\]")  # "Renew non-driver ID card[1]": a page's link reference


def _same_title(a: str, b: str) -> bool:
    return " ".join(_LINK_MARKER.sub("", a).split()).casefold() == " ".join(_LINK_MARKER.sub("", b).split()).casefold()


def section_title(document_title: str, path: tuple[str, ...] | list[str]) -> str:
    """A chunk's title: "Document — Section" (the last two headings of ``path``, joined by " > "; headings that
    repeat the document's title left out), or the document's title alone for a chunk under no heading."""
    parts = [p for p in path if p and not _same_title(p, document_title)][-2:]
    return f"{document_title} — {' > '.join(parts)}" if parts else document_title
