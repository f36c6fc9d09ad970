"""Secure cookies and headers, CSRF on forms, and no personal data in the logs."""

from __future__ import annotations

import io
import logging

import pytest
from django.test import Client

from sbcommon.logfilters import PersonalDataFilter

CSP = "default-src 'self'; script-src 'self'; frame-ancestors 'none'"


@pytest.mark.django_db
def test_pages_send_the_security_headers(client, settings):
    settings.CONTENT_SECURITY_POLICY = CSP
    response = client.get("/login/")
    assert response["Content-Security-Policy"] == CSP
    assert response["X-Frame-Options"] == "DENY"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response["Referrer-Policy"] == "same-origin"
    assert response["Cross-Origin-Opener-Policy"] == "same-origin"
    assert "camera=()" in response["Permissions-Policy"]


@pytest.mark.django_db
def test_the_api_docs_page_is_exempt_from_csp_for_swagger_uis_inline_script(client, settings, owner):
    settings.CONTENT_SECURITY_POLICY = CSP
    client.force_login(owner)
    assert "Content-Security-Policy" not in client.get("/api/docs/")


def test_session_and_csrf_cookies_are_http_only_and_secure_when_asked(settings):
    assert settings.SESSION_COOKIE_HTTPONLY is True
    assert settings.SESSION_COOKIE_SAMESITE == "Lax"
    assert settings.SECURE_CONTENT_TYPE_NOSNIFF is True


@pytest.mark.django_db
def test_a_console_form_posted_without_its_csrf_token_is_refused(owner):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    assert browser.post("/password/", {"old_password": "x", "new_password1": "y", "new_password2": "y"}).status_code == 403
    assert browser.post("/login/", {"username": "owner", "password": "correct horse battery staple"}).status_code == 403


@pytest.fixture
def log_output():
    """The configured console handler (with its personal-data filter) writing into a buffer."""
    handlers = [h for h in logging.getLogger().handlers if any(isinstance(f, PersonalDataFilter) for f in h.filters)]
    assert handlers, "the console log handler has no PersonalDataFilter"
    buffer = io.StringIO()
    previous = [h.setStream(buffer) for h in handlers]
    yield buffer
    for handler, stream in zip(handlers, previous, strict=True):
        handler.setStream(stream)


QUESTION = "Can I deduct the cost of my daughter Amelia's chemotherapy from my taxes?"


@pytest.mark.django_db
def test_a_question_never_reaches_the_logs_even_when_code_logs_it_or_crashes_with_it(client, log_output, monkeypatch, settings):
    settings.CHAT_API_REQUIRE_AUTH = False

    def careless(question, *args, **kwargs):
        logging.getLogger("serving.chat").warning("answering %s", question, extra={"question": question})
        raise RuntimeError(f"could not answer {question!r}")

    import serving.chat

    monkeypatch.setattr(serving.chat, "route", careless)  # the first step of answering
    client.raise_request_exception = False
    response = client.post("/v1/chat/completions", {"model": "auto", "messages": [{"role": "user", "content": QUESTION}]},
                           content_type="application/json")
    assert response.status_code >= 400
    logged = log_output.getvalue()
    assert "answering [redacted" in logged  # the careless line was written, masked
    assert "could not answer" in logged  # and the crash, with its traceback, masked too
    assert "chemotherapy" not in logged
    assert "Amelia" not in logged


def test_the_filter_masks_emails_phones_keys_and_free_text_fields():
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "user %s called from %s with key %s", ("jane.doe@example.com", "+44 20 7946 0958", "sk-abcdefghijklmnop1234"), None)
    record.question = "what is my salary"
    PersonalDataFilter().filter(record)
    assert record.getMessage() == "user [email] called from [phone] with key [key]"
    assert record.question == "[redacted]"
