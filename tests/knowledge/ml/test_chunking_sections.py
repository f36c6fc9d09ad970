"""Chunking by sections: a chunk stays inside its section, carries its title, and tiny sections are packed forward."""

import itertools
import re

from knowledge.ml.chunking import chunk_text, heading_level, section_title, split_sections

# doc2dial's shape: each paragraph opens with its section's title line (FAQ questions too).
DOC2DIAL = (
    "\n\nRenew non-driver ID card[1] \nYou can renew 1 year before and up to 2 years after your non - driver ID expires. "
    "If it is expired for 2 years or more, you can t renew. \n\n"
    "Renew by mail \nComplete the notice we sent you and return it in the envelope provided. Be sure to include payment. \n\n"
    "Fee \nLearn more about documents [2]. \n\n"
    "What if I am 62 or older? \nIf you are 62 or older, you can get a' No Fee' renewal. You must renew by mail or at a DMV office. \n"
)


def test_each_section_becomes_its_own_chunk_titled_by_its_heading():
    chunks = chunk_text(DOC2DIAL, size=1000, overlap=150, sections=True, min_section=0)

    assert [c.heading for c in chunks] == ["Renew non-driver ID card[1]", "Renew by mail", "Fee", "What if I am 62 or older?"]
    assert chunks[1].text == "Complete the notice we sent you and return it in the envelope provided. Be sure to include payment."
    assert section_title("Renew non-driver ID card", chunks[1].path) == "Renew non-driver ID card — Renew by mail"


def test_a_tiny_section_is_packed_with_the_next_and_keeps_its_heading_line():
    chunks = chunk_text(DOC2DIAL, size=1000, overlap=150, sections=True, min_section=100)

    fee = [c for c in chunks if c.heading == "Fee"]
    assert len(fee) == 1
    assert fee[0].text == ("Learn more about documents [2].\n\nWhat if I am 62 or older?\n"
                           "If you are 62 or older, you can get a' No Fee' renewal. You must renew by mail or at a DMV office.")
    assert "What if I am 62 or older?" not in [c.heading for c in chunks]


def test_paragraph_chunking_would_have_merged_the_sections():
    merged = chunk_text(DOC2DIAL, size=1000, overlap=150)

    assert len(merged) < len(chunk_text(DOC2DIAL, size=1000, overlap=150, sections=True, min_section=0))


def test_a_long_section_is_split_with_overlap_and_every_piece_keeps_the_title():
    body = " ".join(f"Rule number {i} says something about renewing by mail." for i in range(30))
    text = f"Renew by mail\n{body}\n\nRenew online\nUse the website to renew your ID card today."
    chunks = chunk_text(text, size=300, overlap=60, sections=True, min_section=0)

    by_mail = [c for c in chunks if c.heading == "Renew by mail"]
    assert len(by_mail) > 3
    assert all(len(c.text) <= 300 + 60 for c in by_mail)
    assert all("website" not in c.text for c in by_mail)  # never runs into the next section
    for before, after in itertools.pairwise(by_mail):
        assert after.text.startswith(before.text.split(". ")[-1])  # whole sentences shared
    assert chunks[-1].heading == "Renew online"
    assert chunks[-1].text == "Use the website to renew your ID card today."


def test_markdown_headings_give_a_path_and_the_document_title_is_not_repeated():
    text = "# Licences\n\n## Fees\nThe fee is ten dollars for every renewal of a licence.\n\n### Discounts\nPeople over 62 pay nothing at all."
    chunks = chunk_text(text, size=500, overlap=0, sections=True, min_section=0)

    assert [c.path for c in chunks] == [("Licences", "Fees"), ("Licences", "Fees", "Discounts")]
    assert section_title("Licences", chunks[0].path) == "Licences — Fees"
    assert section_title("Licences", chunks[1].path) == "Licences — Fees > Discounts"
    assert section_title("Licences", ()) == "Licences"
    assert section_title("Renew non-driver ID card", ("Renew non-driver ID card[1]",)) == "Renew non-driver ID card"


def test_text_without_headings_is_one_section_with_the_document_title():
    text = "you can renew online.\nit takes ten minutes and costs ten dollars, paid by card."
    chunks = chunk_text(text, size=500, overlap=0, sections=True)

    assert [(c.heading, c.path) for c in chunks] == [("", ())]
    assert chunks[0].text == "you can renew online.\nit takes ten minutes and costs ten dollars, paid by card."


def test_no_word_of_the_document_is_lost():
    text = DOC2DIAL + "\n\nContact us\n\nCall 1-800-555-0100\n\nHours\n"
    chunks = chunk_text(text, size=200, overlap=0, sections=True, min_section=100)
    seen = set(" ".join(c.text + " " + " ".join(c.path) for c in chunks).split())

    assert set(text.split()) <= seen


def test_headings_are_short_lines_opening_a_paragraph_not_wrapped_sentences():
    assert heading_level("## Fees") == 2
    assert heading_level("Renew by mail", "Complete the notice") == 7
    assert heading_level("What if I am 62 or older?", "You can get a renewal.") == 7
    assert heading_level("What if I am 62 or older?") == 0  # a lone question is a sentence
    assert heading_level("7. Medical certificates", "Drivers must send one.") == 7
    assert heading_level("If your vehicle does not have a valid inspection", "you cannot renew the registration") == 0
    assert heading_level("You can renew your licence online up to six months before the", "Expiry date.") == 0
    assert heading_level("You can renew online.", "It takes ten minutes.") == 0
    assert heading_level("- Bring your old licence", "") == 0


def test_split_sections_keeps_offsets_into_the_text():
    sections = split_sections(DOC2DIAL)
    for section in sections[1:]:
        assert DOC2DIAL[section.start :].startswith(section.heading)
        for offset, paragraph in section.paragraphs:
            assert DOC2DIAL[offset :].startswith(re.split(r"\n", paragraph)[0])
