"""A user in a real browser: the site asks for a login, accepts the demo login, and shows the
health page with each service's state."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.browser


def test_it_sends_an_anonymous_visitor_to_the_login_page(page, live_site):
    page.goto(f"{live_site.url}/")
    assert page.url == f"{live_site.url}/login/?next=/"
    assert page.locator("h1").inner_text() == "Log in"


def test_the_demo_login_gets_in_and_sees_the_health_page(logged_in_page, live_site):
    page = logged_in_page
    assert page.locator("header .who").inner_text() == live_site.username
    page.click("header nav >> text=Health")
    page.wait_for_url(f"{live_site.url}/health/")
    assert page.locator("#service-database").get_attribute("data-up") == "true"
    assert page.locator("#service-redis").get_attribute("data-up") == "true"
    # Every service has a row with a state and a reason.
    for name in ("database", "redis", "celery", "ray"):
        row = page.locator(f"#service-{name}")
        assert row.locator("td").nth(1).inner_text() in ("up", "down")
        assert row.locator("td").nth(2).inner_text().strip() != ""


def test_a_wrong_password_is_refused(page, live_site):
    page.goto(f"{live_site.url}/login/")
    page.fill("input[name=username]", live_site.username)
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    assert "Wrong username or password" in page.locator("main").inner_text()
