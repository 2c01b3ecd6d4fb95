"""A new user in a real browser, on the whole stack really started (daphne, a Celery worker, the
event ingestor, a Ray head, Redis, one database): log in, create an experiment from the beginner
form, launch it, and watch the run page say running, then succeeded.

The demo is shortened through the form's own fields (as a user would for a quick try): 2 SFT
steps of 8, then 2 GRPO steps of 4 tasks x 4 samples, no eval at startup, a checkpoint at the
last step. A screenshot of the final run page goes to the test's tmp dir.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.live_page import log_in, submit_short_demo, wait_for_status

pytestmark = pytest.mark.browser

# A guard against a hung run, not a timing assertion: the shortened demo takes well under this.
RUN_GUARD_S = 400


def test_a_new_user_launches_the_demo_from_the_form_and_sees_it_succeed(
    page, stack, tmp_path: Path
):
    page.set_default_timeout(30_000)
    page.goto(f"{stack.url}/experiments/")
    assert "/login/" in page.url
    log_in(page, stack)

    page.goto(f"{stack.url}/experiments/new/")
    form = page.locator("#experiment-form")
    assert "beginner" in (form.get_attribute("class") or "")
    submit_short_demo(
        page, stack, "my first run", rft_steps=2, save_interval=2, eval_on_startup=False
    )
    assert page.locator("h1").inner_text().startswith("my first run")

    page.click("#launch")
    page.wait_for_url(f"{stack.url}/runs/*/")
    first = page.locator("h1 .status").get_attribute("data-status")
    assert first in {"queued", "starting", "running"}
    assert wait_for_status(page, stack, {"running"}, RUN_GUARD_S) == "running"
    assert wait_for_status(page, stack, {"succeeded"}, RUN_GUARD_S) == "succeeded"

    body = page.locator("main").inner_text()
    assert "succeeded" in body.lower()
    shot = tmp_path / "run_page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"run page screenshot: {shot}")
