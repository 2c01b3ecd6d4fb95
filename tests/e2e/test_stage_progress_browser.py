"""Issue 23's browser proof for stages (item 1): on the whole stack really started (daphne, a
Celery worker, the event ingestor, a Ray head, Redis, one database; the ``stack`` fixture), a
user launches the demo from the form and watches its run page (never reloaded) through the
GRPO stage: the header says "stage 2 of 2", counts the GRPO stage's own steps ("2 / 4", never
the SFT stage's), gives an ETA from the step rate, shows the whole run's bar per stage, and says
what the run is doing, evaluation included (the demo's eval at the GRPO stage's start was ~90 s
of silence before). Once it has succeeded the header says "4 / 4", the run 100%, and shows when
it ended instead of a heartbeat growing old. The run API gives the same counters.

The demo is shortened through the form's own fields: 2 SFT steps of 8, then 4 GRPO steps of 4
tasks x 4 samples, an eval at the GRPO stage's start. Screenshots go to the test's tmp dir and
to ``$RFT_ARTIFACTS_DIR`` when it is set.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.e2e.live_page import RUN_GUARD_S, keep_screenshot, log_in, submit_short_demo

pytestmark = pytest.mark.browser

RFT_STEPS = 4

HEADER_JS = """() => ({
  status: document.getElementById("run-status").dataset.status,
  stage: document.getElementById("run-stage").textContent,
  stageOf: document.getElementById("run-stage-of").textContent,
  step: document.getElementById("run-step").textContent,
  eta: document.getElementById("run-eta").textContent,
  total: document.getElementById("run-total").textContent,
  phase: document.getElementById("run-phase").dataset.phase,
  phaseText: document.getElementById("run-phase").textContent,
  roles: document.getElementById("run-phase-roles").textContent,
  bars: Array.from(document.querySelectorAll("#run-stage-bars .stage-bar")).map(
    (b) => [b.dataset.stage, b.querySelector("span").style.width]),
  heartbeatLabel: document.getElementById("run-heartbeat-label").textContent,
  heartbeat: document.getElementById("run-heartbeat").textContent,
  reloaded: window.__notReloaded !== true,
})"""


def _watch(page, stack, what: str, ok, seen: list[dict]) -> dict:
    """Read the header every 250 ms (recording each distinct reading in ``seen``) until
    ``ok(state)``; a failed run, a dead process or the guard fails with what was seen."""
    deadline = time.monotonic() + RUN_GUARD_S
    while True:
        state = page.evaluate(HEADER_JS)
        if not seen or {k: v for k, v in state.items() if k != "heartbeat"} != {
            k: v for k, v in seen[-1].items() if k != "heartbeat"
        }:
            seen.append(state)
        if ok(state):
            return state
        if state["status"] in {"failed", "lost", "cancelled"} or (
            state["status"] == "succeeded" and "succeeded" not in what
        ):
            raise AssertionError(
                f"waiting for {what}, the run ended {state['status']}; seen: {seen[-12:]}\n"
                f"{stack.logs_tail()}"
            )
        stack.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no {what} in {RUN_GUARD_S} s; seen {seen[-12:]}\n{stack.logs_tail()}"
            )
        page.wait_for_timeout(250)


def test_the_run_page_counts_the_grpo_stages_own_steps_with_an_eta_and_the_phase(
    browser, stack, tmp_path: Path
):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.set_default_timeout(30_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(f"{stack.url}/experiments/")
        log_in(page, stack)
        page.goto(f"{stack.url}/experiments/new/")
        submit_short_demo(
            page,
            stack,
            "stages",
            rft_steps=RFT_STEPS,
            save_interval=2,
            eval_on_startup=True,
            eval_interval=1000,
        )
        page.click("#launch")
        # a guard, not a timing assertion: the launch's preflight is slow on a loaded machine
        page.wait_for_url(f"{stack.url}/runs/*/", timeout=RUN_GUARD_S * 1000)
        run_id = int(re.search(r"/runs/(\d+)/", page.url).group(1))
        page.evaluate("() => { window.__notReloaded = true; }")
        seen: list[dict] = []

        # the GRPO stage's start: its eval is said to be running
        evaluating = _watch(
            page,
            stack,
            "the GRPO stage's eval",
            lambda s: s["stage"] == "rft" and s["phase"] == "eval",
            seen,
        )
        assert evaluating["stageOf"] == "stage 2 of 2", evaluating
        assert evaluating["phaseText"].startswith("evaluating"), evaluating
        assert "explorer: evaluating" in evaluating["roles"], evaluating
        keep_screenshot(page, shots, "stages-1-grpo-eval")

        # a few GRPO steps in: its own counter, an ETA, the SFT bar full and GRPO's partial
        grpo = _watch(
            page,
            stack,
            "GRPO step 2 or 3 with an ETA",
            lambda s: (
                s["stage"] == "rft"
                and re.fullmatch(rf"[2-3] / {RFT_STEPS}", s["step"]) is not None
                and s["eta"].startswith("ETA ")
            ),
            seen,
        )
        assert not grpo["reloaded"]
        assert grpo["bars"][0] == ["sft_warmup", "100%"], grpo
        assert grpo["bars"][1][0] == "rft" and grpo["bars"][1][1] not in ("0%", "100%"), grpo
        assert grpo["phase"] in {"rollout", "train", "waiting", "checkpoint"}, grpo
        keep_screenshot(page, shots, "stages-2-grpo-steps-eta")
        api = page.evaluate(
            "(id) => fetch(`/api/v1/runs/${id}/`, {headers: {Accept: 'application/json'}})"
            ".then((r) => r.json())",
            run_id,
        )
        assert api["stage"] == "rft" and api["stage_total_steps"] == RFT_STEPS, api
        assert 1 <= api["stage_step"] <= RFT_STEPS and api["step"] == api["stage_step"], api
        assert (api["stage_index"], api["stage_count"]) == (1, 2), api

        # never a step beyond the GRPO stage's total while in it (the "300 / 30" of old)
        for state in seen:
            if state["stage"] == "rft" and re.fullmatch(r"\d+ / \d+", state["step"]):
                step, total = (int(x) for x in state["step"].split(" / "))
                assert total == RFT_STEPS and step <= total, state

        done = _watch(page, stack, "succeeded", lambda s: s["status"] == "succeeded", seen)
        done = _watch(
            page,
            stack,
            "succeeded header",
            lambda s: s["step"] == f"{RFT_STEPS} / {RFT_STEPS}",
            seen,
        )
        assert done["total"] == "100%" and done["eta"] == "" and done["phase"] == "", done
        assert done["heartbeatLabel"] == "Ended" and "ago" in done["heartbeat"], done
        keep_screenshot(page, shots, "stages-3-succeeded")
        print("header readings:", json.dumps(seen, indent=0)[:4000])
    finally:
        context.close()
    assert errors == [], f"errors on the page: {errors}"
