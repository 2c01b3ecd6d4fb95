"""The run page (Chromium, the whole stack of test_run_page, run_page_site.py: web server, ingestor, Redis) for
issue 23's items 7-9: system metrics in their own chart group, checkpoint rows that retention
pruned, the job dir's size on disk, and the opt-in run-end notification.

The system metrics come from a real ``SystemMetricsThread`` (psutil) of the trainer's monitor;
its GPU part reads a fake ``pynvml`` (this machine has no GPU). Headless Chromium shows no
notifications, so the page's ``Notification`` is replaced by a recorder (see NOTIFICATIONS_JS)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import run_page_site
from live_page import keep_screenshot
from run_page_site import guard_hosts, sign_in, stopped_job

from rft_core.monitor.system import GB
from tests.core.fake_pynvml import fake_pynvml

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# the site, its signed-in user and the run it watches, as test_run_page has them (run_page_site)
live_site, user, watched_run = run_page_site.fixtures()

SYSTEM_GPU = "system/trainer/gpu0/utilization_percent"
# headless Chromium shows no notifications and answers no permission prompt: the page's
# Notification API is replaced by one that grants and records what the page asks it to show
NOTIFICATIONS_JS = """() => {
  window.__notes = [];
  class Recording {
    constructor(title, opts) { window.__notes.push(title + " | " + (opts && opts.body)); }
    close() {}
  }
  Recording.permission = "granted";
  Recording.requestPermission = () => Promise.resolve("granted");
  window.Notification = Recording;
}"""


def _checkpoint(job: Path, step: int, size: int) -> Path:
    d = job / "rft" / f"global_step_{step}"
    (d / "actor").mkdir(parents=True)
    (d / "actor" / "model_world_size_1_rank_0.pt").write_bytes(b"w" * size)
    (d / ".full_checkpoint").touch()
    return d


def test_system_metrics_pruned_checkpoints_disk_use_and_the_end_notification(
    live_site, watched_run, browser, user, tmp_path, monkeypatch
):
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(util=(64,), used=(20 * GB,)))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    rut = watched_run
    trainer = rut.monitor("trainer", "rft")
    trainer.log({"actor/pg_loss": 0.5}, step=1)
    trainer.start_system_metrics(0.3)
    first = _checkpoint(rut.job, 2, 3 * 2**20)
    trainer.checkpoint_saved(2, str(first))

    context = browser.new_context()
    page = context.new_page()
    page.set_default_timeout(60_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    foreign = guard_hosts(page, live_site.url)
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{rut.run.get_absolute_url()}")
    try:
        page.wait_for_selector("#run-page[data-live=ready]", timeout=120_000)
    except Exception:
        raise AssertionError(f"the run page never got live; page errors: {errors}") from None
    page.evaluate(NOTIFICATIONS_JS)

    # system metrics: their own group, the mocked GPU's utilisation and psutil's CPU/memory
    page.wait_for_selector(
        f'section.chart-group[data-group=system] .chart[data-metric="{SYSTEM_GPU}"]'
    )
    for name in ("system/trainer/cpu_percent", "system/trainer/memory_rss_gb"):
        page.wait_for_selector(
            f'section.chart-group[data-group=system] .chart[data-metric="{name}"]'
        )
    title = page.locator("section.chart-group[data-group=system] h3").inner_text()
    assert title == "System (CPU, memory, GPU)"

    # retention deletes step 2 before the trainer reports step 4: row 2 turns pruned
    page.wait_for_selector(
        "#checkpoint-rows tr[data-step='2'][data-hf-status=absent] button.convert"
    )
    shutil.rmtree(first)
    trainer.checkpoint_saved(4, str(_checkpoint(rut.job, 4, 5 * 2**20)))
    # folded into one summary row after the rows on disk; a click opens it
    page.wait_for_selector("#checkpoint-rows tr.pruned-summary")
    assert page.locator("button.pruned-toggle").inner_text() == "▸ 1 pruned checkpoint"
    page.click("button.pruned-toggle")
    page.wait_for_selector("#checkpoint-rows tr[data-step='2'][data-hf-status=pruned]")
    assert page.locator("#checkpoint-rows tr[data-step='2'] button.convert").count() == 0
    assert "3.0 MiB" in page.locator("#checkpoint-rows tr[data-step='2']").inner_text()
    page.wait_for_selector("#checkpoint-rows tr[data-step='4'] button.convert")
    # the job dir's size on disk under the rows (reloaded after a checkpoint, within 5 s)
    page.wait_for_function(
        "() => (document.getElementById('job-dir-disk').textContent || '').includes('1 checkpoint on disk, 5.0 MiB')"
    )
    assert "Job dir on disk: 5.0 MiB in all" in page.locator("#job-dir-disk").inner_text()

    # the run-end notification, asked for, comes once when the run stops
    page.click("#notify-end")
    page.wait_for_function(
        "() => localStorage.getItem('rft:notify-end:' + document.getElementById('run-page').dataset.runId) === '1'"
    )
    keep_screenshot(page, tmp_path, "run-page-system-metrics-retention")
    trainer.close()
    stopped_job(rut.run)
    page.wait_for_function("() => window.__notes.length > 0")
    notes = page.evaluate("() => window.__notes")
    assert len(notes) == 1 and "cancelled" in notes[0] and "cancelled by carol" in notes[0], notes
    assert not page.locator("#notify-end").is_checked()
    assert not foreign and not errors, (foreign, errors)
    context.close()
