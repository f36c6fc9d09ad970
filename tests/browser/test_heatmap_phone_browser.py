"""The heatmap's grid on a phone (390 px): each expert's whole day in view, its hours six to a line, each cell labelled
with its hour, and no sideways scrolling (it showed two of 24 hour columns at a time); the counts are the laptop's."""

from __future__ import annotations

import pytest

from experts.models import Expert

from .accounts import PASSWORD, log_in
from .demo_world import shot
from .traffic import seed_traffic

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 1000}
# Each expert row's slug, its cells as shown (the count, the label its cell is headed by, and whether the cell lies
# within the grid's box), and its total.
GRID = """(() => {
    const wrap = document.querySelector('#heatmap').closest('.table-wrap').getBoundingClientRect();
    return [...document.querySelectorAll('#heatmap tbody tr')].map(tr => [tr.dataset.expert,
        [...tr.querySelectorAll('td.heat')].map(td => {
            const box = td.getBoundingClientRect();
            return [Number(td.innerText), getComputedStyle(td, '::before').content,
                    box.left >= wrap.left - 1 && box.right <= wrap.right + 1 && box.width > 0];
        }),
        Number(tr.querySelector('td:last-child').innerText.replace(/\\D/g, ''))]);
})()"""
OVERFLOW = "(() => { const w = document.querySelector('#heatmap').closest('.table-wrap'); return w.scrollWidth - w.clientWidth; })()"


def test_a_phone_shows_each_experts_whole_day_without_sideways_scrolling_and_the_same_counts(live_server, django_user_model, browser_page):
    django_user_model.objects.create_user("admin", "admin@example.com", PASSWORD, is_staff=True)
    seed_traffic()  # every hour of the last day has requests
    Expert.objects.filter(slug="ssa").update(name="Social Security Administration: retirement, disability and survivors")
    page, base = browser_page, live_server.url
    log_in(page, "admin", f"{base}/heatmap/")

    page.set_viewport_size(DESKTOP)
    laptop = page.evaluate(GRID)
    hours = page.evaluate("[...document.querySelectorAll('#heatmap thead th.num')].slice(0, -1).map(th => th.textContent.trim())")
    routed = int(page.inner_text("#heatmap-total"))
    assert len(hours) == 24
    assert page.locator("#heatmap thead th").first.is_visible()  # the laptop's is the plain table

    page.set_viewport_size(PHONE)
    page.reload()
    if page.evaluate(OVERFLOW) > 1:
        shot(page, "phone-heatmap")
    assert page.evaluate(OVERFLOW) <= 1  # was 572 px: 896 px of grid in a 324 px card
    phone = page.evaluate(GRID)
    assert [slug for slug, _, _ in phone] == ["dmv", "ssa", "va"]
    for (slug, cells, total), (_, laptop_cells, laptop_total) in zip(phone, laptop, strict=True):
        assert len(cells) == 24, slug
        assert all(inside for _, _, inside in cells), slug  # every hour in view
        assert [label for _, label, _ in cells] == [f'"{hour}:00"' for hour in hours], slug  # each headed by its hour, in order
        assert [count for count, _, _ in cells] == [count for count, _, _ in laptop_cells], slug
        assert sum(count for count, _, _ in cells) == total == laptop_total, slug
    assert sum(total for _, _, total in phone) == routed
    # Four lines of six hours, not one long line.
    tops = page.evaluate("[...document.querySelectorAll('#heatmap tbody tr[data-expert=\"dmv\"] td.heat')].map(td => Math.round(td.getBoundingClientRect().top))")
    assert len(set(tops)) == 4

    for window in ("7d", "30d"):  # the windows by day wrap the same way
        page.goto(f"{base}/heatmap/?window={window}")
        assert page.evaluate(OVERFLOW) <= 1, window
        assert all(inside for _, cells, _ in page.evaluate(GRID) for _, _, inside in cells), window
