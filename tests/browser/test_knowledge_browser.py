"""The knowledge console in a real browser: upload a document with the progress bar, watch the job, search it.

Run with ``pytest -m browser tests/browser``; it needs Debian's Chromium (``make browser``) and skips without it.
Screenshots land in /tmp/knowledge-*.png for a human to look at. The real MiniLM encoder embeds the
document and the query.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jobs.models import Job
from knowledge.models import Document
from tests.factories import make_expert

from .accounts import PASSWORD, log_in

SCREENSHOTS = Path("/tmp")
GUIDE = """# Replacing a lost licence

If your driving licence is lost or stolen, request a replacement online. You need your licence number
and the last four digits of your social security number. The replacement costs $17.50 and arrives by
mail within two weeks; print the temporary document to drive in the meantime.

# Renewing a licence

Most drivers can renew online up to one year before the licence expires. A vision test is required
every eight years; bring your glasses if you wear them to drive.
"""

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]




@pytest.fixture
def own_store(tmp_path, settings):
    from knowledge.stores import get_store

    settings.QDRANT_URL, settings.QDRANT_PATH, settings.VAR_DIR = "", str(tmp_path / "qdrant"), tmp_path
    get_store.cache_clear()
    yield
    get_store.cache_clear()


def test_a_user_uploads_a_document_and_finds_it_by_searching(live_server, django_user_model, browser_page, own_store, tmp_path, encoder):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD, is_staff=True)  # teamless experts: staff edit
    make_expert("dmv", "Motor Vehicles", chunk_size=400, chunk_overlap=60, public=False)
    guide = tmp_path / "licence-guide.md"
    guide.write_text(GUIDE)
    page = browser_page

    log_in(page, "owner", f"{live_server.url}/knowledge/")
    expect(page.locator("h1")).to_have_text("Knowledge")
    page.click("#knowledge-bases >> text=Motor Vehicles")
    expect(page.locator("h1")).to_have_text("Motor Vehicles")

    # Upload: XHR with a progress bar, then the ingest job's page (the job runs eagerly in tests).
    page.set_input_files("#id_files", str(guide))
    page.click("#upload-button")
    # Wait on the browser, not the database: polling the in-memory test database from this thread while the
    # upload writes makes SQLite's shared cache refuse one of them at once ("database table is locked").
    expect(page).to_have_url(re.compile(rf"^{re.escape(live_server.url)}/jobs/\d+/$"), timeout=60_000)
    assert page.url == f"{live_server.url}/jobs/{Job.objects.latest('pk').pk}/"
    expect(page.locator(".badge.status-succeeded").first).to_be_visible(timeout=60_000)
    page.screenshot(path=str(SCREENSHOTS / "knowledge-job.png"), full_page=True)

    document = Document.objects.get()
    assert (document.title, document.version) == ("Replacing a lost licence", 1)
    assert document.indexed_at is not None
    assert document.chunk_count >= 2

    # Back on the expert's page: the document is listed; a search shows the three methods side by side.
    page.goto(f"{live_server.url}/knowledge/dmv/")
    expect(page.locator(f"#document-{document.pk}")).to_contain_text("Replacing a lost licence")
    expect(page.locator(f"#document-{document.pk}")).to_contain_text("v1")
    page.fill("#id_q", "what does a replacement licence cost")
    with page.expect_response(lambda r: "/search/" in r.url) as searched:
        page.click("#search-button")
    assert searched.value.status == 200
    for method in ("dense", "sparse", "hybrid"):
        expect(page.locator(f"#results-{method} .passage").first).to_be_visible()
    expect(page.locator("#results-hybrid .passage").first).to_contain_text("$17.50")
    assert page.url == f"{live_server.url}/knowledge/dmv/"
    page.screenshot(path=str(SCREENSHOTS / "knowledge-search.png"), full_page=True)


    # Deleting asks first (data-confirm, since the page's policy blocks inline handlers): dismissed, nothing goes.
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click(f"#document-{document.pk} button:has-text('Delete')")
    expect(page.locator(f"#document-{document.pk}")).to_be_visible()
    assert Document.objects.filter(pk=document.pk).exists()
    asked: list[str] = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.click(f"#document-{document.pk} button:has-text('Delete')")
    expect(page.locator(f"#document-{document.pk}")).to_have_count(0, timeout=30_000)
    assert asked == ["Delete this document and its chunks?"]
