"""Fixtures for the knowledge tests: a fresh embedded store per test, a small fast encoder, experts and files.

The encoder is a bag-of-words hashing encoder (deterministic, no model to load) so that ingesting
and searching run in milliseconds; the real MiniLM encoder is exercised by the browser test and
the demo pipeline test.
"""

from __future__ import annotations

import io

import pytest

from experts.models import Expert
from tests.factories import make_expert
from tests.support.hashing_encoder import HashingEncoder, use_encoder


@pytest.fixture
def encoder_stub(monkeypatch, settings):
    """Every knowledge code path gets the hashing encoder; EMBEDDING_MODEL names it."""
    enc = HashingEncoder()
    settings.EMBEDDING_MODEL = enc.name
    use_encoder(monkeypatch, enc)
    return enc


@pytest.fixture
def store(tmp_path, settings):
    """A fresh embedded store under tmp_path, returned by get_store() for the test's duration."""
    from knowledge.stores import get_store

    settings.QDRANT_URL = ""
    settings.QDRANT_PATH = str(tmp_path / "qdrant")
    settings.VAR_DIR = tmp_path
    get_store.cache_clear()
    yield get_store()
    get_store().close()
    get_store.cache_clear()


@pytest.fixture
def kb(db, store, encoder_stub):
    """The knowledge-base setup most tests want: store + encoder."""
    return store


@pytest.fixture
def dmv(db) -> Expert:
    return make_expert("dmv", "Motor Vehicles", chunk_size=300, chunk_overlap=50, public=False)


@pytest.fixture
def ssa(db) -> Expert:
    return make_expert("ssa", "Social Security", chunk_size=300, chunk_overlap=50, public=False)


def make_pdf(text: str) -> bytes:
    """A minimal valid one-page PDF showing ``text`` (one line per line of text)."""
    lines = text.split("\n")
    ops = ["BT", "/F1 12 Tf", "72 720 Td", "14 TL"]
    for line in lines:
        escaped = line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
        ops.append(f"({escaped}) Tj T*")
    ops.append("ET")
    stream = "\n".join(ops).encode("latin-1")
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length " + str(len(stream)).encode() + b" >>\nstream\n" + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(f"{number} 0 obj\n".encode() + body + b"\nendobj\n")
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    out.write(f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def make_docx(title: str, paragraphs: list[tuple[str, str]]) -> bytes:
    """A .docx with a title and (style, text) paragraphs, e.g. ("Heading 1", "Renewals")."""
    import docx

    document = docx.Document()
    document.core_properties.title = title
    for style, text in paragraphs:
        document.add_paragraph(text, style=style)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()
