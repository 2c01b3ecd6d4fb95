"""The run page as a browser test reads it: one evaluate of its state, waiting on it without
reloading the page (or, on a page that reloads, on its status badge), and screenshots kept as
artifacts; and the steps before it: logging in, and the demo experiment from the form, shortened
through its own fields (the live-run, launch, stage-progress and outside-run tests)."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

# Guards against a hung run, not timing assertions: the shortened demo takes well under these.
RUN_GUARD_S = 420
STEP_GUARD_S = 120

# Read in one evaluate, so the badge and the chart are seen at the same moment.
PAGE_STATE_JS = """() => {
  const badge = document.getElementById("run-status");
  // watched as a user watches reward climb: on screen (live points reach the charts in view)
  const group = document.querySelector('#charts section[data-group="reward"]');
  if (group) group.scrollIntoView({ block: "nearest" });
  const reward = {};
  document.querySelectorAll('#charts section[data-group="reward"] .chart').forEach((div) => {
    const data = div.data || [];
    reward[div.dataset.metric] = Math.max(0, ...data.map((t) => (t.x || []).length));
  });
  return {
    status: badge ? badge.dataset.status : null,
    step: document.getElementById("run-step").textContent,
    reward: reward,
    rewardPoints: Math.max(0, ...Object.values(reward)),
    logLines: document.querySelectorAll("#log-lines li").length,
    samples: document.querySelectorAll("#samples .sample").length,
    marker: window.__notReloaded === true,
  };
}"""


@dataclass
class GuardedPage:
    """A page of its own browser context that reaches only the site: a request to another host
    is aborted and listed in ``foreign``; console errors and page errors go to ``errors``."""

    context: object
    page: object
    foreign: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def check(self) -> None:
        assert self.foreign == [], f"requests left the site: {self.foreign}"
        assert self.errors == [], f"errors in the browser console: {self.errors}"


def guarded_page(browser, site_url: str) -> GuardedPage:
    site = urlsplit(site_url).netloc
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    guarded = GuardedPage(context, None)

    def only_the_site(route) -> None:
        if urlsplit(route.request.url).netloc == site:
            route.continue_()
        else:
            guarded.foreign.append(route.request.url)
            route.abort()

    context.route("**/*", only_the_site)
    page = guarded.page = context.new_page()
    page.set_default_timeout(30_000)
    page.on("console", lambda m: guarded.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: guarded.errors.append(f"pageerror: {e}"))
    return guarded


def keep_screenshot(page, shots: Path, name: str) -> Path:
    path = shots / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000, f"{path} looks empty"
    artifacts = os.environ.get("RFT_ARTIFACTS_DIR")
    if artifacts:
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(artifacts) / path.name)
    print(f"screenshot: {path}")
    return path


def wait_page(page, stack, what: str, ok, guard_s: float = RUN_GUARD_S) -> dict:
    """Read the page's state (without reloading it) until ``ok(state)``; a run that ends
    otherwise, a dead process or the guard fails with the page's text and the stack's logs."""
    deadline = time.monotonic() + guard_s
    while True:
        state = page.evaluate(PAGE_STATE_JS)
        if ok(state):
            return state
        if state["status"] in {"failed", "lost"} or (
            state["status"] in {"succeeded", "cancelled"}
            and "succeeded" not in what
            and "cancelled" not in what
        ):
            raise AssertionError(
                f"waiting for {what}, the run ended {state['status']}: {state}\n"
                f"{page.locator('main').inner_text()[:2000]}\n{stack.logs_tail()}"
            )
        stack.check_alive()
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {guard_s:.0f} s: {state}\n{stack.logs_tail()}")
        page.wait_for_timeout(250)


def wait_converted(page, checkpoint_id: str) -> None:
    """Until the checkpoint's row in the run page's table is ready or failed (the convert task
    ended); the caller asserts which."""
    page.wait_for_function(
        """(id) => {
          const row = document.querySelector(`#checkpoint-rows tr[data-checkpoint="${id}"]`);
          return row && ["ready", "failed"].includes(row.dataset.hfStatus);
        }""",
        arg=checkpoint_id,
        timeout=RUN_GUARD_S * 1000,
    )


def log_in(page, stack) -> None:
    """Fill the login form the page shows with the stack's demo user; lands on the list."""
    page.fill("input[name=username]", stack.username)
    page.fill("input[name=password]", stack.password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{stack.url}/experiments/")


def submit_short_demo(
    page,
    stack,
    name: str,
    *,
    rft_steps: int,
    save_interval: int,
    eval_on_startup: bool,
    eval_interval: int | None = None,
    max_checkpoints_to_keep: int | None = None,
) -> None:
    """On the open new-experiment form: the demo config shortened through the form's own fields
    (2 SFT steps of 8, then ``rft_steps`` GRPO steps of 4 tasks x 4 samples), saved as ``name``;
    lands on the experiment's page. The optional fields are left as the demo has them if None."""
    page.fill("#experiment-name", name)
    page.fill("[name='buffer.total_steps']", str(rft_steps))
    page.fill("[name='buffer.batch_size']", "4")
    page.fill("[name='algorithm.repeat_times']", "4")
    page.fill("[name='trainer.save_interval']", str(save_interval))
    if eval_interval is not None:
        page.fill("[name='explorer.eval_interval']", str(eval_interval))
    page.check("#expert-switch")  # the fields below are behind it (the beginner form is short)
    if max_checkpoints_to_keep is not None:
        page.fill("[name='trainer.max_checkpoints_to_keep']", str(max_checkpoints_to_keep))
    page.select_option("[name='explorer.eval_on_startup']", "true" if eval_on_startup else "false")
    # the warmup stage's buffer overrides are fields of their own
    sft_steps = page.locator("[name='stages[0].buffer.total_steps']")
    sft_batch = page.locator("[name='stages[0].buffer.train_batch_size']")
    assert (sft_steps.input_value(), sft_batch.input_value()) == ("500", "8")
    sft_steps.fill("2")
    sft_batch.fill("8")
    page.click("button[name=source][value=form]")
    page.wait_for_url(f"{stack.url}/experiments/*/")


def wait_for_status(page, stack, wanted: set[str], guard_s: float) -> str:
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
