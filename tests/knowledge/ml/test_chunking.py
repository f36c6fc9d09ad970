"""Chunking keeps sizes near the target, respects headings and overlaps at sentence boundaries."""

import pytest

from knowledge.ml.chunking import chunk_text

DOC = """Renewing a licence

You can renew your licence online up to one year before it expires. Renewal costs depend on your age. The fee is paid by card.

Vision test
You must pass a vision test at renewal. An eye doctor may submit the result for you. Some offices test on site.

""" + " ".join(f"Sentence number {i} adds some filler text to the section." for i in range(40))


def test_chunks_stay_near_the_target_size():
    chunks = chunk_text(DOC, size=300, overlap=60)
    assert len(chunks) > 3
    assert all(len(c.text) <= 300 + 80 for c in chunks)
    assert [c.position for c in chunks] == list(range(len(chunks)))


def test_a_heading_starts_a_new_chunk_and_is_remembered():
    chunks = chunk_text(DOC, size=300, overlap=0)
    vision = [c for c in chunks if c.text.startswith("Vision test")]
    assert len(vision) == 1
    assert vision[0].heading == "Vision test"
    assert chunks[0].heading == "Renewing a licence"


def test_neighbouring_chunks_share_whole_sentences():
    chunks = chunk_text(DOC, size=300, overlap=120)
    last_sentence = chunks[-2].text.splitlines()[-1]
    assert chunks[-1].text.startswith(last_sentence)


def test_bad_sizes_are_rejected():
    with pytest.raises(ValueError, match="at least 100"):
        chunk_text("x", size=10)
    with pytest.raises(ValueError, match="overlap"):
        chunk_text("x", size=200, overlap=150)


def test_empty_text_gives_no_chunks():
    assert chunk_text("   \n\n  ") == []
