"""The playground's clarifying question in a real browser: the choices are buttons, at a laptop's and a phone's width,
and a button asks the question again of the expert it names (streamed, as the Ask button does).

Screenshots land in /tmp/console-playground-clarify-*.png for a human to look at.
"""

from __future__ import annotations

import pytest

from serving import chat
from serving.chat import Source
from tests.factories import make_expert

from .accounts import PASSWORD, log_in
from .playground import FakeTurn

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
QUESTION = "I lost my card, how do I get a replacement?"
CHOICES = [{"slug": "ssa", "name": "Social Security"}, {"slug": "dmv", "name": "Motor Vehicles"}]


class AskedBack(FakeTurn):
    """``chat.open_stream`` for a question the experts' documents do not settle: a question back, with the choices."""

    def __init__(self, question: str, model: str = "auto"):
        super().__init__(question, model)
        self._result.answer = "Which do you mean: Social Security (ssa) or Motor Vehicles (dmv)? Reply with one of them and its expert will answer your question."
        self._result.expert, self._result.citations, self._result.passages, self._result.grounded = "", [], [], False
        self._result.answer_source, self._result.clarify, self._result.conversation_id = "clarify", CHOICES, "conv_browser"
        self.expert, self.source = "", Source(answer_source="clarify")


@pytest.mark.parametrize("width", [1280, 390])
def test_the_choices_are_buttons_and_one_asks_the_question_of_its_expert(live_server, django_user_model, browser_page, monkeypatch, width):
    from playwright.sync_api import expect

    django_user_model.objects.create_user("owner", "owner@example.com", PASSWORD)
    for choice in CHOICES:
        make_expert(choice["slug"], choice["name"])
    asked = []

    def open_stream(question: str, model: str = "auto", **kwargs: object) -> FakeTurn:
        asked.append((question, model, kwargs.get("conversation_id")))
        return AskedBack(question, model) if model == "auto" else FakeTurn(question, model)

    monkeypatch.setattr(chat, "open_stream", open_stream)
    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/playground/", timeout=60_000)  # the server's first page loads the whole console: slow on a busy machine
    log_in(page, "owner")
    page.fill("#id_question", QUESTION)
    page.click("button:has-text('Ask')")
    buttons = page.locator("#clarify-choices button")
    expect(buttons).to_have_count(2)
    expect(buttons.nth(0)).to_have_text("Social Security")
    expect(buttons.nth(1)).to_have_text("Motor Vehicles")
    expect(page.locator("#answer")).to_contain_text("Which do you mean")
    assert page.evaluate("document.documentElement.scrollWidth") <= width + 1  # nothing scrolls sideways, a phone's width included
    page.screenshot(path=f"/tmp/console-playground-clarify-{width}.png", full_page=True)

    with page.expect_response(lambda r: r.url.endswith("/playground/stream/")) as answered:
        buttons.nth(1).click()
    assert answered.value.status == 200
    expect(page.locator("#answer")).to_contain_text("renew online up to six months")
    expect(page.locator("#clarify-choices")).to_have_count(0)
    assert asked == [(QUESTION, "auto", ""), (QUESTION, "dmv", "conv_browser")]
