"""An SFT stage worth watching (issue 31, item 2), in Debian's chromium against the whole stack
(daphne, the ingestor, a Celery worker: ``run_page_site``): while the run is in its SFT stage
the run page's headline charts are the SFT loss, the token accuracy and the held-out accuracy,
with no reward group (the stage has no reward), timings in their own group; the header and
``/runs/`` show the SFT loss as the stage's figure. Events come from rft_core's own Monitor
through the run's Redis stream, as a run's do.
"""

from __future__ import annotations

import pytest
import run_page_site
from run_page_site import guard_hosts, sign_in, wait_points

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

live_site, user, watched_run = run_page_site.fixtures()

SFT_LOSS = [2.0, 1.2, 0.8, 0.6]
TOKEN_ACCURACY = [0.2, 0.45, 0.6, 0.7]

# the visible chart groups in page order, and the metrics each one draws
GROUPS_JS = """() => Array.from(document.querySelectorAll("#charts > section.chart-group"))
  .filter((sec) => !sec.hidden)
  .map((sec) => [sec.dataset.group, sec.querySelector("h3").textContent,
                 Array.from(sec.querySelectorAll(".chart-cell:not([hidden]) .chart"))
                   .map((c) => c.dataset.metric).sort()])"""


def _write_sft_stage(rut) -> None:
    trainer = rut.monitor("trainer", "sft_warmup")
    for step, (loss, accuracy) in enumerate(zip(SFT_LOSS, TOKEN_ACCURACY, strict=True), 1):
        trainer.log(
            {
                "actor/sft_loss": loss,
                "actor/sft_token_accuracy": accuracy,
                "actor/grad_norm": 1.0,
                "time/train_step": 3.0,
                "perf/throughput": 900.0,
            },
            step=step,
        )
        if step % 2 == 0:  # the held-out eval every eval_interval (2) steps
            trainer.log({"eval/heldout/accuracy/mean@1": 0.1 * step}, step=step)


def test_an_sft_stage_shows_its_loss_accuracy_and_held_out_accuracy_and_no_reward(
    live_site, watched_run, browser, user, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    rut = watched_run
    _write_sft_stage(rut)
    page = browser.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    foreign = guard_hosts(page, live_site.url)
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{rut.run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready]")
    wait_points(page, "actor/sft_loss", 4)
    wait_points(page, "eval/heldout/accuracy/mean@1", 2)

    groups = page.evaluate(GROUPS_JS)
    assert groups[:2] == [
        ["sft", "SFT", ["actor/sft_loss", "actor/sft_token_accuracy"]],
        ["accuracy", "Accuracy", ["eval/heldout/accuracy/mean@1"]],
    ], groups
    assert "reward" not in [g[0] for g in groups], groups
    assert ["timing", "Timing", ["time/train_step"]] in groups, groups
    # the header: the stage's own figure, the newest SFT loss
    page.wait_for_function("() => document.getElementById('run-headline').textContent === '0.600'")
    assert page.locator("#run-headline-label").inner_text() == "SFT loss"

    page.goto(f"{live_site.url}/runs/")
    cell = page.locator(f'tr[data-run-id="{rut.run.pk}"] td[data-field="reward"]')
    assert cell.inner_text() == "SFT loss 0.600"
    assert not errors and not foreign, (errors, foreign)
