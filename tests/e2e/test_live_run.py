"""Issue 10's browser proof: a user in Debian's chromium, on the whole stack really started
(daphne, a Celery worker, the event ingestor, a Ray head, Redis, one database; the ``stack``
fixture), watches a run live: log in, create an experiment from the form with the demo config,
launch it, and on the run page (never reloaded) see reward points appear in the chart while the
badge still says running, log lines arrive and rollout samples show; once it has succeeded,
convert a checkpoint with its Convert button and see its row turn ready with model.safetensors in
its file list; then launch a second run, cancel it from its page and see it stopping, then
cancelled.

The demo is shortened through the form's own fields: 2 SFT steps of 8, then 8 GRPO steps of
4 tasks x 4 samples, a checkpoint every 4 steps, no evaluation. Every request to a host other
than the site is aborted and recorded, and the test fails if there was one; so does an error in
the browser console. Screenshots are printed and kept under the test's tmp dir (and copied to
``$RFT_ARTIFACTS_DIR`` when it is set).
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e.live_page import (
    PAGE_STATE_JS,
    STEP_GUARD_S,
    guarded_page,
    keep_screenshot,
    log_in,
    submit_short_demo,
    wait_converted,
    wait_page,
)

pytestmark = pytest.mark.browser

RFT_STEPS = 8
# the explorer's reward curve (the trainer's critic/rewards/mean has points in SFT already)
REWARD = "rollout/reward/mean"


def test_a_user_watches_a_run_live_converts_a_checkpoint_and_cancels_a_second_run(
    browser, stack, tmp_path: Path
):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    print(f"screenshots dir: {shots}")
    site_host = urlsplit(stack.url).netloc
    guarded = guarded_page(browser, stack.url)
    guarded.page.on(
        "websocket",
        lambda ws: None if urlsplit(ws.url).netloc == site_host else guarded.foreign.append(ws.url),
    )
    try:
        _drive(guarded.page, stack, shots)
    except AssertionError as failure:
        raise AssertionError(
            f"{failure}\nbrowser console errors: {guarded.errors}\n"
            f"foreign requests: {guarded.foreign}"
        ) from failure
    finally:
        guarded.context.close()
    guarded.check()


def _drive(page, stack, shots: Path) -> None:
    # ---- log in
    page.goto(f"{stack.url}/experiments/")
    assert "/login/" in page.url
    log_in(page, stack)

    # ---- an experiment from the form with the demo config, shortened through its fields
    page.goto(f"{stack.url}/experiments/new/")
    submit_short_demo(
        page,
        stack,
        "watch it live",
        rft_steps=RFT_STEPS,
        save_interval=4,
        eval_on_startup=False,
        eval_interval=1000,
        # keep every checkpoint (the demo keeps one per stage): the test converts an older one
        max_checkpoints_to_keep=0,
    )
    experiment_url = page.url
    assert page.locator("h1").inner_text().startswith("watch it live")

    # ---- launch; the run page is never reloaded from here on (the marker survives)
    page.click("#launch")
    page.wait_for_url(f"{stack.url}/runs/*/")
    page.evaluate("() => { window.__notReloaded = true; }")
    first = page.evaluate(PAGE_STATE_JS)
    assert first["status"] in {"queued", "starting", "running"}, first

    # reward points in the chart while the badge says running, and more of them later while
    # it still does: the chart grows live
    seen = wait_page(
        page,
        stack,
        "reward points while running",
        lambda s: s["status"] == "running" and s["reward"].get(REWARD, 0) >= 1,
    )
    grown = wait_page(
        page,
        stack,
        "more reward points while running",
        lambda s: s["status"] == "running" and s["reward"].get(REWARD, 0) > seen["reward"][REWARD],
        guard_s=STEP_GUARD_S,
    )
    live = wait_page(
        page,
        stack,
        "log lines and samples while running",
        lambda s: s["status"] == "running" and s["logLines"] > 0 and s["samples"] > 0,
        guard_s=STEP_GUARD_S,
    )
    assert live["marker"], "the run page was reloaded"
    keep_screenshot(page, shots, "1-running")
    print(f"live: first {seen}, then {grown}, then {live}")

    # ---- succeeded, still without a reload
    done = wait_page(page, stack, "succeeded", lambda s: s["status"] == "succeeded")
    assert done["marker"], "the run page was reloaded"
    assert done["reward"][REWARD] == RFT_STEPS, done
    assert "Succeeded" in page.locator("#run-status").inner_text()
    sample = page.locator("#samples .sample").first
    assert "prompt" in sample.inner_text() and "reward" in sample.inner_text()
    assert page.locator("#log-lines li").count() > 0

    # ---- convert a checkpoint: its row turns ready, with model.safetensors in its file list
    convert = page.locator(
        "#checkpoint-rows button.convert >> visible=true"
    ).first  # pruned rows have none
    convert.wait_for(state="visible", timeout=STEP_GUARD_S * 1000)
    checkpoint_id = convert.get_attribute("data-id")
    row = page.locator(f"#checkpoint-rows tr[data-checkpoint='{checkpoint_id}']")
    assert row.get_attribute("data-hf-status") in {"absent", "failed"}
    convert.click()
    page.wait_for_function(
        """(id) => {
          const row = document.querySelector(`#checkpoint-rows tr[data-checkpoint="${id}"]`);
          return row && row.dataset.hfStatus !== "absent";
        }""",
        arg=checkpoint_id,
    )
    wait_converted(page, checkpoint_id)
    assert row.get_attribute("data-hf-status") == "ready", (
        f"{row.inner_text()}\n{stack.logs_tail()}"
    )
    assert "HF ready" in row.inner_text()
    files = row.locator("details.hf-files")
    files.wait_for(state="attached")
    files.locator("summary").click()
    assert "model.safetensors" in files.inner_text()
    assert page.evaluate("() => window.__notReloaded === true"), "the run page was reloaded"
    keep_screenshot(page, shots, "2-succeeded-converted")

    # ---- a second run, cancelled from its page: stopping, then cancelled
    page.goto(experiment_url)
    page.click("#launch")
    page.wait_for_url(f"{stack.url}/runs/*/")
    page.evaluate("() => { window.__notReloaded = true; }")
    wait_page(page, stack, "the second run running", lambda s: s["status"] == "running")
    page.click("#cancel-button")
    cancel_state = page.locator("#cancel-state")
    # the badge still active and the row saying stopping, read at the same moment
    page.wait_for_function(
        """() => {
          const state = document.getElementById("cancel-state");
          const status = document.getElementById("run-status").dataset.status;
          return !state.hidden && /stopping/i.test(state.textContent)
            && ["queued", "starting", "running"].includes(status);
        }"""
    )
    keep_screenshot(page, shots, "3-stopping")
    wait_page(page, stack, "cancelled", lambda s: s["status"] == "cancelled")
    assert page.locator("#cancel-button").is_hidden()
    assert "cancelled" in cancel_state.inner_text().lower()
    assert page.evaluate("() => window.__notReloaded === true"), "the run page was reloaded"
    keep_screenshot(page, shots, "4-cancelled")
