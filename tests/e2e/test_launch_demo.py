"""A new user in a real browser, on the whole stack really started (daphne, a Celery worker, the
event ingestor, a Ray head, Redis, one database): log in, create an experiment from the beginner
form, launch it, and watch the run page say running, then succeeded.

The demo is shortened through the form's own fields (as a user would for a quick try): 2 SFT
steps of 8, then 2 GRPO steps of 4 tasks x 4 samples, no eval at startup, a checkpoint at the
last step. A screenshot of the final run page goes to the test's tmp dir.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

# A guard against a hung run, not a timing assertion: the shortened demo takes well under this.
RUN_GUARD_S = 400


def wait_for_status(page, stack, wanted: set[str], guard_s: float = RUN_GUARD_S) -> str:
    """Reload the run page (it is static until the live run page lands) until its status is
    one of ``wanted``; a final status that is not wanted (succeeded included, while waiting to
    see running) fails at once with the page's text and the stack's logs."""
    deadline = time.monotonic() + guard_s
    while True:
        status = page.locator("h1 .status").get_attribute("data-status")
        if status in wanted:
            return status
        if status in {"succeeded", "failed", "cancelled", "lost"}:
            raise AssertionError(
                f"the run ended {status}: {page.locator('main').inner_text()[:2000]}\n"
                + stack.logs_tail()
            )
        stack.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"the run stayed {status} for {guard_s:.0f} s (wanted {sorted(wanted)}):\n"
                + stack.logs_tail()
            )
        time.sleep(1)
        page.reload()


def test_a_new_user_launches_the_demo_from_the_form_and_sees_it_succeed(
    page, stack, tmp_path: Path
):
    page.set_default_timeout(30_000)
    page.goto(f"{stack.url}/experiments/")
    assert "/login/" in page.url
    page.fill("input[name=username]", stack.username)
    page.fill("input[name=password]", stack.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.url}/experiments/")

    page.goto(f"{stack.url}/experiments/new/")
    form = page.locator("#experiment-form")
    assert "beginner" in (form.get_attribute("class") or "")
    page.fill("#experiment-name", "my first run")
    page.fill("[name='buffer.total_steps']", "2")
    page.fill("[name='buffer.batch_size']", "4")
    page.fill("[name='algorithm.repeat_times']", "4")
    page.fill("[name='trainer.save_interval']", "2")
    page.check("#expert-switch")  # the fields below are behind it (the beginner form is short)
    page.select_option("[name='explorer.eval_on_startup']", "false")
    # the warmup stage's buffer overrides are fields of their own
    sft_steps = page.locator("[name='stages[0].buffer.total_steps']")
    sft_batch = page.locator("[name='stages[0].buffer.train_batch_size']")
    assert (sft_steps.input_value(), sft_batch.input_value()) == ("450", "32")
    sft_steps.fill("2")
    sft_batch.fill("8")
    page.click("button[name=source][value=form]")
    page.wait_for_url(f"{stack.url}/experiments/*/")
    assert page.locator("h1").inner_text().startswith("my first run")

    page.click("#launch")
    page.wait_for_url(f"{stack.url}/runs/*/")
    first = page.locator("h1 .status").get_attribute("data-status")
    assert first in {"queued", "starting", "running"}
    assert wait_for_status(page, stack, {"running"}) == "running"
    assert wait_for_status(page, stack, {"succeeded"}) == "succeeded"

    body = page.locator("main").inner_text()
    assert "succeeded" in body.lower()
    shot = tmp_path / "run_page.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    print(f"run page screenshot: {shot}")
