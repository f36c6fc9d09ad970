"""Empty states lead a new team to its own data (Import, Discovery, the documents upload), not to the demo loader."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_team, make_user

pytestmark = pytest.mark.django_db

EMPTY_PAGES = ["console-overview", "knowledge-list", "console-training"]


@pytest.mark.parametrize("page", EMPTY_PAGES)
def test_a_new_team_is_pointed_to_import_and_the_documents_upload_never_to_load_demo(client, page):
    client.force_login(make_user("rita", teams=(make_team("roads"),)))

    html = client.get(reverse(page)).content.decode()

    assert f'href="{reverse("labeling-import")}" class="first-step-import">Import page</a>' in html
    assert f'href="{reverse("knowledge-list")}">Knowledge</a> page' in html
    assert "load_demo" not in html
    assert "ask staff to add you" not in html


def test_a_user_in_no_team_is_told_to_ask_staff(client):
    client.force_login(make_user("loner"))

    assert "You are in no team yet: ask staff to add you to one." in client.get(reverse("console-overview")).content.decode()


@pytest.mark.parametrize("page", EMPTY_PAGES)
def test_staff_see_load_demo_as_an_aside_after_the_import_path(client, page):
    client.force_login(make_user("admin", staff=True))

    html = client.get(reverse(page)).content.decode()

    assert html.index('class="first-step-import"') < html.index("(Staff: <code>manage.py load_demo</code> loads a demo world instead.)")
