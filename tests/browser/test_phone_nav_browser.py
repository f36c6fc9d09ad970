"""The top bar on a phone (390 px): one line, the brand and a Menu button, instead of a quarter of the screen; the
button opens every nav link, by touch and by keyboard. On a laptop (1280 px) the top bar is the one line it always was."""

from __future__ import annotations

import pytest

from console.nav import NAV_GROUPS, NAV_ITEMS

from .accounts import PASSWORD, log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 1000}
FIRST_GROUP = [entry.label for entry in NAV_ITEMS if entry.group == NAV_GROUPS[0]]


def topbar_height(page) -> float:
    return page.locator("header.topbar").bounding_box()["height"]


def nav_links(page) -> list[tuple[str, str, str]]:
    """Each nav link as (its menu's slug, "" for the first group's; its label; its path)."""
    return page.evaluate("""[...document.querySelectorAll('nav.nav a')].map(a => [
        a.closest('details') ? a.closest('details').dataset.group : '', a.textContent.trim(), new URL(a.href).pathname])""")


def test_the_top_bar_takes_one_line_of_a_phone_and_its_menu_reaches_every_nav_link(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/")
    page.set_viewport_size(PHONE)
    for path in ("/", "/traces/", "/heatmap/", "/jobs/"):
        page.goto(f"{base}{path}")
        assert topbar_height(page) <= 0.1 * PHONE["height"], path  # it was 202 px of 844 (24%)
        assert not page.locator("nav.nav").is_visible(), path
    links = nav_links(page)
    assert len(links) == len(NAV_ITEMS)  # a staff user's: every page of the console

    # Each link by touch: open the menu, open the link's group when it is in one, tap it, land on its page.
    for group, label, path in links:
        page.goto(f"{base}/")
        page.click("button.menu-button")
        if group:
            page.click(f"nav details[data-group='{group}'] summary")
        link = page.locator("nav.nav a", has_text=label).first
        assert link.is_visible(), label
        box = link.bounding_box()
        assert box["x"] >= 0, label  # on screen, not past its edge
        assert box["x"] + box["width"] <= PHONE["width"], label
        link.click()
        page.wait_for_url(f"{base}{path}*")
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"] + 1  # the open menu widens nothing

    # By keyboard: Tab reaches the button, Enter opens the menu, Tab walks into it, Enter on a group opens it, Escape closes.
    page.goto(f"{base}/")
    page.keyboard.press("Tab")  # the brand
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "menu-button"
    assert page.get_attribute("button.menu-button", "aria-expanded") == "false"
    page.keyboard.press("Enter")
    assert page.get_attribute("button.menu-button", "aria-expanded") == "true"
    assert topbar_height(page) > 0.1 * PHONE["height"]  # open, it pushes the page down
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent.trim()") == FIRST_GROUP[0]
    for _ in FIRST_GROUP[1:]:
        page.keyboard.press("Tab")
    page.keyboard.press("Tab")  # the second group's summary
    assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    group, label, path = next(link for link in links if link[0] == NAV_GROUPS[1].lower())
    assert page.evaluate("document.activeElement.textContent.trim()") == label
    page.keyboard.press("Escape")  # the group closes, its name keeps the focus, the menu stays open
    assert page.locator("nav.nav").is_visible()
    assert page.evaluate("document.activeElement.tagName") == "SUMMARY"
    page.keyboard.press("Escape")  # then the menu closes, and the focus is back on its button
    assert not page.locator("nav.nav").is_visible()
    assert page.evaluate("document.activeElement.className") == "menu-button"
    page.keyboard.press("Enter")
    page.locator("nav.nav a", has_text=FIRST_GROUP[2]).focus()
    page.keyboard.press("Enter")
    page.wait_for_url(f"{base}{next(p for _, lab, p in links if lab == FIRST_GROUP[2])}*")

    # The account's links are in the menu too.
    page.click("button.menu-button")
    assert page.locator(".account button:has-text('Log out')").is_visible()


def test_a_laptop_keeps_the_one_line_top_bar_with_no_menu_button(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/")
    page.set_viewport_size(DESKTOP)
    page.goto(f"{base}/traces/")
    assert topbar_height(page) == 52
    assert not page.locator("button.menu-button").is_visible()
    boxes = [page.locator("header.topbar").locator(f"a:text-is('{label}')").bounding_box() for label in ("Switchboard", *FIRST_GROUP)]
    boxes += [page.locator(f"nav details[data-group='{g.lower()}'] summary").bounding_box() for g in NAV_GROUPS[1:]]
    boxes.append(page.locator(".account button").bounding_box())
    middles = [box["y"] + box["height"] / 2 for box in boxes]
    assert max(middles) - min(middles) <= 2  # the brand, the first group's links, the menus and the account on one line
    assert [box["x"] for box in boxes] == sorted(box["x"] for box in boxes)  # in that order, left to right
    assert page.locator(".account button:has-text('Log out')").is_visible()
    page.click("nav details[data-group='operations'] summary")  # a group still opens as a floating panel over the page
    assert topbar_height(page) == 52
    page.click("nav details[data-group='operations'] .nav-panel >> text=Jobs")
    page.wait_for_url(f"{base}/jobs/*")


def test_without_scripts_a_phone_gets_the_nav_unfolded_rather_than_a_menu_button_that_cannot_open(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True, is_superuser=True)
    context = browser_page.context.browser.new_context(java_script_enabled=False, viewport=PHONE)
    page = context.new_page()
    log_in(page, "admin", f"{live_server.url}/")
    assert page.locator("nav.nav").is_visible()
    assert not page.locator("button.menu-button").is_visible()
    page.click("nav.nav a:text-is('Traces')")
    page.wait_for_url(f"{live_server.url}/traces/*")
    context.close()
