"""Chunking that respects headings, paragraphs and sentences.

Text is split into blocks (paragraphs; a heading line starts a new section), blocks longer than the
target are split at sentence boundaries, and blocks are packed greedily into chunks of about
``size`` characters. Consecutive chunks share up to ``overlap`` characters of whole sentences so a
fact cut at a boundary is still found. Each chunk remembers the heading it falls under.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEADING = re.compile(r"^(#{1,6}\s+.+|[A-Z][^\n.!?]{0,80})$")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


@dataclass
class Chunk:
    """A piece of a document with its position and section heading."""

    text: str
    position: int
    start: int
    heading: str = ""


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


def chunk_text(text: str, size: int = 1000, overlap: int = 150) -> list[Chunk]:
    """Split ``text`` into chunks of about ``size`` characters with ``overlap`` characters of context."""
    if size < 100:
        raise ValueError("chunk size must be at least 100 characters")
    if not 0 <= overlap < size // 2:
        raise ValueError("chunk overlap must be between 0 and half the chunk size")
    chunks: list[Chunk] = []
    heading = ""
    current: list[str] = []
    current_start = 0
    current_heading = ""

    def flush() -> list[str]:
        if not current:
            return []
        body = "\n".join(current).strip()
        chunks.append(Chunk(text=body, position=len(chunks), start=current_start, heading=current_heading))
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
