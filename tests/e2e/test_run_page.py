"""The live run page in Debian's chromium against real processes: daphne, the event ingestor
(a consumer group of its own) and a Celery worker (its own queue, the conversions' queue) on
this session's test database and the test Redis. Events reach the page the way a run's do:
written into the run's Redis stream by rft_core's own ``Monitor`` with its Redis sink, stored by
the ingestor, pushed over the WebSocket (or polled while the socket is refused).

Every request the page makes must go to the site: other hosts are aborted and fail the test.
Screenshots are kept under the test's tmp dir.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import run_page_site
from run_page_site import (
    REWARDS,
    guard_hosts,
    sign_in,
    stopped_job,
    trace,
    wait_points,
    write_rft,
    write_sft,
)

from webapp.runs.models import LogLine, Run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "core"))

from checkpoint_fixtures import build_model, build_tokenizer, tiny_config  # noqa: E402
from convert_fixtures import save_job_step  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# daphne, the ingestor and carol's watched run (run_page_site)
live_site, user, watched_run = run_page_site.fixtures()


# ------------------------------------------------------------------ tests


def test_the_run_page_streams_charts_logs_checkpoints_and_samples_and_converts(
    live_site, watched_run, browser, user, tmp_path, monkeypatch
):
    # Playwright's sync API keeps an event loop running: let this test's ORM reads through
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    rut = watched_run
    write_sft(rut)
    write_rft(rut, range(1, 4))
    context = browser.new_context(accept_downloads=True)
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    foreign = guard_hosts(page, live_site.url)
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{rut.run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready]")

    # the x axis starts on the steps of the newest stage (rft from its own 1); the SFT stage's
    # charts wait in the whole-run view, one click away
    wait_points(page, "rollout/reward/mean", 3)
    assert trace(page, "rollout/reward/mean", "raw", "x")[:3] == [1, 2, 3]
    assert page.locator('.chart-cell:has(.chart[data-metric="actor/sft_loss"])').is_hidden()
    page.select_option("#x-mode", "step")

    # the first points (from the snapshot or the live batches), then more while the page is open
    wait_points(page, "actor/sft_loss", 5)
    write_rft(rut, range(4, 7))
    wait_points(page, "rollout/reward/mean", 6)
    assert trace(page, "rollout/reward/mean", "raw", "y") == REWARDS
    # one time line: the rft stage's steps come after the sft warmup's 5, each stage a band
    assert trace(page, "rollout/reward/mean", "raw", "x") == [6, 7, 8, 9, 10, 11]
    shapes = page.evaluate(
        "() => document.querySelector('.chart[data-metric=\"rollout/reward/mean\"]')"
        ".layout.shapes.map((s) => [s.x0, s.x1])"
    )
    assert shapes == [[0, 5], [5, 11]]
    assert page.locator('.chart[data-metric="rollout/reward/mean"] text', has_text="rft").count()
    page.screenshot(path=str(tmp_path / "run-page.png"), full_page=True)

    # 6 points are too few to smooth (static/js/chart_rules.js): the slider leaves them as they
    # are, the raw ones kept
    page.eval_on_selector(
        "#smoothing", "el => { el.value = '0.9'; el.dispatchEvent(new Event('input')); }"
    )
    assert trace(page, "rollout/reward/mean", "smoothed", "y") == pytest.approx(REWARDS)
    assert trace(page, "rollout/reward/mean", "raw", "y") == REWARDS
    page.eval_on_selector(
        "#smoothing", "el => { el.value = '0'; el.dispatchEvent(new Event('input')); }"
    )
    assert trace(page, "rollout/reward/mean", "smoothed", "y") == pytest.approx(REWARDS)

    # x axis: relative time (seconds since the start), then wall time (a date axis)
    page.select_option("#x-mode", "relative")
    rel = trace(page, "rollout/reward/mean", "raw", "x")
    assert rel != [6, 7, 8, 9, 10, 11] and all(0 <= x < 3600 for x in rel)
    assert rel == sorted(rel)
    page.select_option("#x-mode", "wall")
    wall = trace(page, "rollout/reward/mean", "raw", "x")
    assert all(abs(x / 1000 - time.time()) < 3600 for x in wall)
    page.select_option("#x-mode", "step")

    # logs: every actor's lines, filtered by actor, level and search
    lines = page.locator("#log-lines li")
    total_logs = 1 + 2 * 6
    page.wait_for_function(
        "n => document.querySelectorAll('#log-lines li').length >= n", arg=total_logs
    )
    assert lines.count() == total_logs
    page.select_option("#log-actor", "trainer")
    assert lines.count() == 1 + 6
    page.select_option("#log-level", "WARNING")
    assert lines.count() == 6
    page.fill("#log-search", "step 4 ")
    page.wait_for_function("() => document.querySelectorAll('#log-lines li').length === 1")
    assert "trainer step 4 grad norm high" in lines.first.inner_text()
    page.fill("#log-search", "")
    page.select_option("#log-actor", "")
    page.select_option("#log-level", "")
    page.wait_for_function(
        "n => document.querySelectorAll('#log-lines li').length === n", arg=total_logs
    )

    # the download holds every line, the filtered one only the trainer's
    body = page.request.get(f"{live_site.url}/runs/{rut.run.pk}/logs.txt").text()
    assert len(body.splitlines()) == total_logs == LogLine.objects.filter(run=rut.run).count()
    with page.expect_download() as download:
        page.click("#log-download")
    assert len(Path(download.value.path()).read_text().splitlines()) == total_logs
    page.select_option("#log-actor", "trainer")
    with page.expect_download() as download:
        page.click("#log-download")
    trainer_only = Path(download.value.path()).read_text().splitlines()
    assert len(trainer_only) == 7 and all(" trainer " in line for line in trainer_only)

    # samples of a step
    samples = [
        {"prompt": "What is 12 plus 30?", "response": "<answer>42</answer>", "truth": "42",
         "reward": 1.0},
        {"prompt": "What is 2 plus 2?", "response": "<answer>5</answer>", "truth": "4",
         "reward": 0.0},
    ]  # fmt: skip
    rut.monitor("explorer", "rft").samples(samples, step=6)
    page.wait_for_selector(".sample-step[data-step='6'] .sample")
    assert page.locator(".sample").count() == 2
    assert "What is 12 plus 30?" in page.inner_text("#samples")

    # a real checkpoint, converted through the page by the worker
    tokenizer = build_tokenizer()
    model = build_model(tiny_config(len(tokenizer)))
    step_dir = save_job_step(rut.job, 6, model, tokenizer)
    rut.monitor("trainer", "rft").checkpoint_saved(6, str(step_dir))
    row = page.locator(
        "#checkpoint-rows tr[data-step='6'][data-checkpoint]:not([data-checkpoint=''])"
    )
    row.locator("button.convert").click()
    page.wait_for_selector(
        "#checkpoint-rows tr[data-step='6'][data-hf-status=ready]", timeout=180_000
    )
    page.wait_for_selector("#checkpoint-rows tr[data-step='6'] .hf-files")
    page.click("#checkpoint-rows tr[data-step='6'] .hf-files summary")
    files = page.inner_text("#checkpoint-rows tr[data-step='6'] .hf-files")
    assert "model.safetensors" in files and "config.json" in files
    assert str(step_dir / "actor" / "huggingface") in page.inner_text("#checkpoint-rows")
    page.screenshot(path=str(tmp_path / "run-page-converted.png"), full_page=True)

    # cancel: stopping while requested
    page.click("#cancel-button")
    page.wait_for_selector("#cancel-state:not([hidden])")
    assert "stopping" in page.inner_text("#cancel-state")
    page.wait_for_selector("#cancel-button", state="hidden")
    assert Run.objects.get(pk=rut.run.pk).cancel_requested_at is not None
    # the job stops (what the cancel task records once Ray stopped it): the page says cancelled
    stopped_job(rut.run)
    page.wait_for_selector("#run-status[data-status=cancelled]")
    assert page.inner_text("#cancel-state") == "cancelled"

    assert foreign == []
    assert errors == []
    live_site.check_alive()
    context.close()


def test_it_polls_and_says_so_when_the_websocket_is_refused(
    live_site, watched_run, browser, user, tmp_path
):
    rut = watched_run
    write_sft(rut)
    page = browser.new_page()
    page.set_default_timeout(30_000)
    foreign = guard_hosts(page, live_site.url)
    sockets: list[str] = []

    def refuse(ws) -> None:
        sockets.append(ws.url)
        ws.close(code=1011, reason="refused by the test")

    page.route_web_socket("**/ws/**", refuse)
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{rut.run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready]")
    page.wait_for_selector("#live-notice:not([hidden])")
    assert "polling" in page.inner_text("#live-notice")
    wait_points(page, "actor/sft_loss", 5)
    write_rft(rut, range(1, 4))
    wait_points(page, "rollout/reward/mean", 3)
    assert trace(page, "rollout/reward/mean", "raw", "y") == REWARDS[:3]
    page.wait_for_function("() => document.querySelectorAll('#log-lines li').length === 7")
    assert page.get_attribute("#run-page", "data-transport") == "polling"
    assert sockets  # the page did try the socket
    page.screenshot(path=str(tmp_path / "run-page-polling.png"), full_page=True)
    assert foreign == []
    page.close()


def _from_a_thread(work) -> None:
    """Run ``work`` (ORM writes and Channels sends) off this thread: Playwright's loop runs here."""
    import threading

    worker = threading.Thread(target=work)
    worker.start()
    worker.join()


def test_a_live_message_that_the_run_ended_is_confirmed_before_the_page_freezes(
    live_site, watched_run, browser, user, monkeypatch
):
    """A "cancelled" state for this run arrives on the socket while the run is still running
    (as another deployment's run #1 once did on a shared Redis): the page asks live.json, which
    says running, and goes on following the run; a real cancel is then shown."""
    from webapp.runs.live import publish_run, run_group, run_state, send

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    run = watched_run.run
    page = browser.new_page()
    page.set_default_timeout(30_000)
    sign_in(page, live_site.url, user.username)
    page.goto(f"{live_site.url}{run.get_absolute_url()}")
    page.wait_for_selector("#run-page[data-live=ready][data-transport=websocket]")

    def step(n: int) -> None:
        Run.objects.filter(pk=run.pk).update(step=n)
        publish_run(run)

    _from_a_thread(lambda: step(2))
    page.wait_for_function("() => document.getElementById('run-step').textContent === '2 / 8'")

    def misrouted() -> None:
        fake = run_state(Run.objects.get(pk=run.pk))
        fake.update(status="cancelled", finished_at=fake["started_at"], exit_reason="not this run")
        send([run_group(run.pk)], {"type": "run", "run": fake})
        step(3)  # the run goes on, published after the misrouted message

    _from_a_thread(misrouted)
    page.wait_for_function("() => document.getElementById('run-step').textContent === '3 / 8'")
    assert page.get_attribute("#run-status", "data-status") == "running"
    page.wait_for_selector("#run-page[data-confirmations='1']")  # live.json answered: running
    assert page.get_attribute("#run-status", "data-status") == "running"
    assert page.inner_text("#run-error .exit-reason") == ""
    _from_a_thread(lambda: step(4))
    page.wait_for_function("() => document.getElementById('run-step').textContent === '4 / 8'")

    stopped_job(run)  # a real cancel: live.json agrees, the page shows it
    page.wait_for_selector("#run-status[data-status=cancelled]")
    page.wait_for_selector("#run-page[data-confirmations='2']")
    assert page.inner_text("#run-error .exit-reason") == "cancelled by carol"
    page.close()
