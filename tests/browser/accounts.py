"""Logging in through the console's login form as a user does (not a test module)."""

PASSWORD = "correct horse battery staple"


def log_in(page, username: str, url: str | None = None) -> None:
    """Open ``url`` (when given; else the login form is already showing) and log in as ``username``."""
    if url is not None:
        page.goto(url)
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button:has-text('Log in')")
