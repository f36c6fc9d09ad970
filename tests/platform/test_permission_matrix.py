"""The per-team permission matrix, over EVERY URL of the project (enumerated from the resolver, so a new page is covered).

Four callers: anonymous, a member of another team (stranger), a member of the expert's team
(owner) and staff. The expert ``alpha-desk`` belongs to team Alpha and carries markers in its name,
description and one document; none of them may appear in any response to the stranger or to
anonymous callers, whatever the page. Pages that take an expert's slug answer the owner and staff.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from experts.models import Expert
from jobs.models import Job
from knowledge import services as knowledge
from knowledge.parsers import DocumentInput

SECRET_NAME = "Zebulon Payroll Desk"
SECRET_TEXT = "quokka-ledger-5521"
# Reachable without signing in by design.
PUBLIC = {"healthz", "readyz", "login", "schema", "api-docs", "metrics", "password_reset"}
OK_FOR_ANONYMOUS = {301, 302, 401, 403, 404, 405}
REFUSED = {400, 401, 403, 404, 405}


def _walk(patterns, prefix: str = ""):
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern.url_patterns, prefix + str(pattern.pattern))
        elif isinstance(pattern, URLPattern):
            yield prefix + str(pattern.pattern), pattern.name or ""


ROUTES = [(route, name) for route, name in _walk(get_resolver().url_patterns)
          if not route.startswith(("admin/", "static/", "^static", "media/")) and "(?P" not in route]


def _is_api(route: str) -> bool:
    return route.startswith(("api/", "v1/", "metrics"))


@pytest.fixture
def world(db, settings):
    settings.CHAT_API_REQUIRE_AUTH = True
    alpha, beta = Group.objects.create(name="Alpha"), Group.objects.create(name="Beta")
    expert = Expert.objects.create(slug="alpha-desk", name=SECRET_NAME, description=f"Internal {SECRET_TEXT}", team=alpha)
    Expert.objects.create(slug="beta-desk", name="Beta Desk", team=beta)
    document, _ = knowledge.upsert_document(expert, DocumentInput(external_id="salaries.txt", title=f"Salaries {SECRET_TEXT}", text=f"Salary bands {SECRET_TEXT}."))
    job = Job.objects.create(kind="index_documents", key="alpha", title=f"Index {SECRET_NAME}", params={"expert": "alpha-desk"})
    owner = User.objects.create_user("alice", password="pw-alice-123456")
    owner.groups.add(alpha)
    stranger = User.objects.create_user("bob", password="pw-bob-123456")
    stranger.groups.add(beta)
    staff = User.objects.create_user("sam", password="pw-sam-123456", is_staff=True)
    return {"expert": expert, "document": document, "job": job, "owner": owner, "stranger": stranger, "staff": staff}


def _url(route: str, world) -> str:
    def fill(match: re.Match) -> str:
        converter, name = match.group(1), match.group(2)
        if converter == "slug" and name == "slug":
            return world["expert"].slug
        if converter in ("int", None) and "job" in route:
            return str(world["job"].pk)
        if converter in ("int", None) and ("document" in route or "delete" in route):
            return str(world["document"].pk)
        return "1" if converter in ("int", None) else "x"

    return "/" + re.sub(r"<(?:(\w+):)?(\w+)>", fill, route)


def _client(user) -> Client:
    client = Client(raise_request_exception=False)
    if user is not None:
        client.force_login(user)
    return client


def _leaks(response) -> bool:
    body = b"".join(response.streaming_content) if getattr(response, "streaming", False) else response.content
    return SECRET_NAME.encode() in body or SECRET_TEXT.encode() in body


def test_the_matrix_covers_the_console_and_the_api():
    names = {name for _, name in ROUTES}
    assert {"console-expert", "knowledge-expert", "api-expert-documents", "chat-completions", "console-jobs"} <= names
    assert len(ROUTES) > 40


def test_anonymous_callers_are_sent_to_sign_in_or_refused_everywhere(world):
    client = _client(None)
    failures = []
    for route, name in ROUTES:
        url = _url(route, world)
        for method in ("get", "post"):
            response = getattr(client, method)(url)
            if response.status_code >= 500:
                failures.append(f"{method.upper()} {url} ({name}): {response.status_code}")
            elif name not in PUBLIC and response.status_code not in OK_FOR_ANONYMOUS:
                failures.append(f"{method.upper()} {url} ({name}): {response.status_code} for an anonymous caller")
            elif response.status_code in (301, 302) and not _is_api(route) and "login" not in response.get("Location", ""):
                failures.append(f"{method.upper()} {url} ({name}): redirects to {response['Location']}, not to sign-in")
            elif _leaks(response):
                failures.append(f"{method.upper()} {url} ({name}): shows Alpha's data to an anonymous caller")
    assert not failures, "\n".join(failures)


def test_a_member_of_another_team_sees_nothing_of_alphas_expert_on_any_page(world):
    client = _client(world["stranger"])
    failures = []
    for route, name in ROUTES:
        url = _url(route, world)
        response = client.get(url)
        if response.status_code >= 500:
            failures.append(f"GET {url} ({name}): {response.status_code}")
        elif "<slug:slug>" in route and response.status_code not in REFUSED:
            failures.append(f"GET {url} ({name}): {response.status_code}, expected 403/404 for another team's expert")
        if _leaks(response):
            failures.append(f"GET {url} ({name}): shows Alpha's data to a member of Beta")
    assert not failures, "\n".join(failures)


def test_a_member_of_another_team_cannot_change_alphas_expert(world):
    client = _client(world["stranger"])
    failures = []
    for route, name in ROUTES:
        if "<slug:slug>" not in route and not name.startswith(("console-job", "api-job")):
            continue
        url = _url(route, world)
        for method in ("post", "delete"):
            response = getattr(client, method)(url)
            if response.status_code not in REFUSED:
                failures.append(f"{method.upper()} {url} ({name}): {response.status_code}, expected a refusal")
            elif _leaks(response):
                failures.append(f"{method.upper()} {url} ({name}): refusal shows Alpha's data")
    assert not failures, "\n".join(failures)
    world["document"].refresh_from_db()  # still there
    assert Job.objects.filter(key="alpha").count() == 1


@pytest.mark.parametrize("who", ["owner", "staff"])
def test_the_team_and_staff_open_every_page_of_alphas_expert(world, who):
    client = _client(world[who])
    failures = []
    for route, name in ROUTES:
        if "<slug:slug>" not in route or (_is_api(route) and "documents" not in route):
            continue
        url = _url(route, world)
        response = client.get(url)
        if response.status_code >= 500:
            failures.append(f"GET {url} ({name}): {response.status_code}")
        elif response.status_code not in (200, 405) and not ("<int:" in route and response.status_code == 404):
            failures.append(f"GET {url} ({name}): {response.status_code} for the {who}")
    assert not failures, "\n".join(failures)
