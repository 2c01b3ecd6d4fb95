"""A signed-in page of Debian's chromium for the webapp's browser tests (``live_server``).

with signed_in_page(live_server.url, "alice", "pw") as (page, errors):
    page.goto(live_server.url + "/runs/1/")
assert errors == []  # the page's uncaught JS errors
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from playwright.sync_api import Page, sync_playwright

CHROMIUM_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking"]


@contextmanager
def signed_in_page(site_url: str, username: str, password: str) -> Iterator[tuple[Page, list]]:
    """A page signed in through the login form; yields it and the list its JS errors go to."""
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/favicon.ico", lambda route: route.fulfill(status=204))
        page.goto(site_url + "/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", password)
        page.click("button[type=submit]")
        try:
            yield page, errors
        finally:
            browser.close()
