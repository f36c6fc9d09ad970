"""Reaching a console page through the nav as a user does: the first group's links are in view, the others in menus."""


def open_nav(page, group: str, label: str) -> None:
    """Open the nav menu ``group`` (its slug: "experts", "operations") and click its ``label`` link."""
    page.click(f"nav details[data-group='{group}'] summary")
    page.click(f"nav details[data-group='{group}'] .nav-panel >> text={label}")
