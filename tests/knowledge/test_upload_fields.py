"""The documents upload form lists the file types and the JSON Lines fields plainly, and what it lists is what the parser reads."""

from __future__ import annotations

import html
import re

import pytest

from knowledge.parsers import parse_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(admin_client, kb, dmv) -> str:
    return admin_client.get("/knowledge/dmv/").content.decode()


def test_the_upload_form_lists_the_file_types_and_which_fields_are_required(page):
    formats = page.split('id="upload-formats"')[1].split("</div>")[0]

    for kind in ("plain text (.txt)", "Markdown (.md", "HTML", "PDF", "Word (.docx)", "JSON Lines (.jsonl)"):
        assert kind in formats
    fields = re.findall(r"<li><code>(\w+)</code> (?:<strong>)?(\w+)", formats)
    assert fields == [("text", "required"), ("title", "optional"), ("url", "optional"), ("id", "optional"), ("metadata", "optional")]


def test_the_example_line_on_the_form_is_read_field_by_field(page):
    example = html.unescape(re.search(r"Example: <code>(.+?)</code>", page).group(1))

    parsed = parse_bytes((example + "\n" + example.replace("renew-licence", "plates") + "\n").encode(), "docs.jsonl")

    first = parsed.documents[0]
    assert (parsed.kind, len(parsed.documents)) == ("jsonl", 2)
    assert (first.external_id, first.title, first.url, first.text) == (
        "renew-licence", "Renewing a licence", "https://example.org/renew", "You can renew online…",
    )
