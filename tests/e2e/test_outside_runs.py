"""Issue 10, Deliver 6, as a user does it, on the whole stack (the ``stack`` fixture): in
Debian's chromium the user creates an API token on the account page; a ``trinity run`` started
from a terminal (a subprocess with RFT_DASHBOARD_URL and RFT_API_TOKEN set, on the stack's Ray
cluster) registers itself and appears under that user, its run page filling live while the
badge says running, then succeeded when the CLI reports exit 0; then the user imports that job
dir from the import page and finds its whole history as a second run (its reward points, its
log, its checkpoints), and converts one of its checkpoints. The job dir is in the user's runs
area, which the import page names. Requests to other hosts and errors
in the browser console fail the test, as in test_live_run.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.live_page import (
    RUN_GUARD_S,
    STEP_GUARD_S,
    guarded_page,
    keep_screenshot,
    log_in,
    wait_converted,
    wait_page,
)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
RFT_STEPS = 6
REWARD = "rollout/reward/mean"


def short_demo_config(path: Path) -> Path:
    """The demo config, shortened the way a user edits a YAML: 2 SFT steps of 8, then 6 GRPO
    steps of 4 tasks x 4 samples, a checkpoint every 3 steps, no evaluation."""
    text = (ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text()
    for old, new in [
        ("name: grpo_demo", "name: from_my_terminal"),
        ("total_steps: 500", "total_steps: 2"),  # the SFT stage's (of 8 rows, as written)
        ("total_steps: 30", f"total_steps: {RFT_STEPS}"),
        ("save_interval: 10", "save_interval: 3"),
        ("eval_interval: 10", "eval_interval: 1000"),
        ("eval_on_startup: true", "eval_on_startup: false"),
        # keep every checkpoint (the demo keeps one per stage): the test converts an older one
        ("max_checkpoints_to_keep: 1", "max_checkpoints_to_keep: 0"),
    ]:
        assert old in text, old
        text = text.replace(old, new)
    text = text.replace("batch_size: 8\n", "batch_size: 4\n", 1).replace(
        "repeat_times: 8", "repeat_times: 4"
    )
    path.write_text(text)
    return path


def api_runs(stack, token: str) -> list[dict]:
    request = urllib.request.Request(
        f"{stack.url}/api/v1/runs/", headers={"Authorization": f"Bearer {token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the test's site
        return json.loads(answer.read())["results"]


def test_a_terminal_run_appears_live_and_its_job_dir_imports_with_its_history(
    browser, stack, ray_head, tmp_path: Path
):
    shots = tmp_path / "screenshots"
    shots.mkdir()
    guarded = guarded_page(browser, stack.url)
    page = guarded.page
    terminal = None

    def terminal_log() -> str:
        path = tmp_path / "terminal.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    try:
        # ---- a token from the account page, as the README says
        page.goto(f"{stack.url}/login/")
        log_in(page, stack)
        page.goto(f"{stack.url}/account/")
        page.fill("#token-name", "my terminal")
        page.click("#token-create button[type=submit]")
        token = page.locator("#new-token-key").inner_text().strip()
        assert token

        # ---- the user's runs area, as the import page names it: their job dirs go there
        page.goto(f"{stack.url}/runs/import/")
        area = Path(page.locator("#runs-area").inner_text().strip())
        assert area.parent == Path(stack.env["RFT_RUNS_DIR"]).resolve() / "users", area

        # ---- trinity run from a terminal, pointed at the dashboard
        config = short_demo_config(tmp_path / "my.yaml")
        checkpoints = area / "terminal"
        # the terminal joins the stack's Ray cluster by its GCS address, as a user on the
        # cluster does (RAY_ADDRESS=<head>:<port>; the head has Ray's token auth on)
        env = {**stack.env, "RFT_DASHBOARD_URL": stack.url, "RFT_API_TOKEN": token,
               "TRINITY_CHECKPOINT_ROOT_DIR": str(checkpoints),
               "RAY_ADDRESS": f"127.0.0.1:{ray_head.gcs_port}", "RAY_AUTH_MODE": "token"}  # fmt: skip
        # a terminal knows none of the stream's settings: registering gives them (the deployment
        # prefix included, else its events would go where the stack's ingestor never reads)
        for name in ("RFT_RUN_ID", "RFT_EVENTS_REDIS_URL", "RFT_REDIS_PREFIX"):
            env.pop(name, None)
        out = open(tmp_path / "terminal.log", "wb")  # noqa: SIM115 - the child writes it
        terminal = subprocess.Popen(
            [str(Path(sys.executable).parent / "trinity"), "run", "--config", str(config)],
            cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        out.close()

        deadline = time.monotonic() + RUN_GUARD_S
        runs = []
        while not runs:
            runs = [r for r in api_runs(stack, token) if r["origin"] == "terminal"]
            if terminal.poll() is not None and not runs:
                raise AssertionError(f"trinity run exited {terminal.returncode}:\n{terminal_log()}")
            assert time.monotonic() < deadline, terminal_log()
            time.sleep(0.5)
        run = runs[0]
        assert run["experiment_name"] == "from_my_terminal" and run["status"] == "running"
        _watch_and_import(page, stack, run, terminal, terminal_log, checkpoints, shots)
    except AssertionError as failure:
        log = terminal_log() if terminal is not None else ""
        raise AssertionError(
            f"{failure}\n--- terminal\n{log}\nconsole errors: {guarded.errors}\n"
            f"foreign requests: {guarded.foreign}"
        ) from failure
    finally:
        if terminal is not None and terminal.poll() is None:
            terminal.terminate()
            terminal.wait(timeout=60)
        guarded.context.close()
    guarded.check()


def _watch_and_import(page, stack, run, terminal, terminal_log, checkpoints, shots) -> None:
    """The terminal run's page fills live and ends succeeded; its job dir then imports."""
    # ---- its page fills live
    page.goto(f"{stack.url}/runs/{run['id']}/")
    page.evaluate("() => { window.__notReloaded = true; }")
    assert page.locator("#run-origin").inner_text() == "from a terminal"
    assert page.locator("#cancel-button").is_hidden()
    seen = wait_page(
        page, stack, "reward points while running",
        lambda s: s["status"] == "running" and s["reward"].get(REWARD, 0) >= 1,
    )  # fmt: skip
    wait_page(
        page, stack, "more reward points and log lines while running",
        lambda s: s["status"] == "running" and s["logLines"] > 0
        and s["reward"].get(REWARD, 0) > seen["reward"][REWARD],
        guard_s=STEP_GUARD_S,
    )  # fmt: skip
    keep_screenshot(page, shots, "terminal-1-running")
    assert terminal.wait(timeout=RUN_GUARD_S) == 0, terminal_log()
    done = wait_page(page, stack, "succeeded", lambda s: s["status"] == "succeeded")
    assert done["marker"] and done["reward"][REWARD] == RFT_STEPS, done
    assert "exited 0 in its terminal" in page.locator("#run-error").inner_text()
    keep_screenshot(page, shots, "terminal-2-succeeded")

    # ---- the same job dir imported from the import page: its whole history
    job_dir = checkpoints / "demo" / "from_my_terminal"
    assert (job_dir / "config.yaml").is_file()  # trinity run wrote its config there
    page.goto(f"{stack.url}/experiments/")
    page.click("text=Import a job dir")
    page.fill("#import-job-dir", str(job_dir))
    page.click("#import-form button[type=submit]")
    page.wait_for_url(f"{stack.url}/runs/*/")
    assert page.locator("#run-origin").inner_text() == "imported"
    imported = wait_page(
        page, stack, "the imported run's history (succeeded)",
        lambda s: s["status"] == "succeeded" and s["reward"].get(REWARD, 0) == RFT_STEPS
        and s["logLines"] > 0,
        guard_s=STEP_GUARD_S,
    )  # fmt: skip
    assert "#2" in page.locator("h1").inner_text()  # run 2 of the same experiment
    convert = page.locator(
        "#checkpoint-rows button.convert >> visible=true"
    ).first  # pruned rows have none
    convert.wait_for(state="visible")
    checkpoint_id = convert.get_attribute("data-id")
    convert.click()
    wait_converted(page, checkpoint_id)
    row = page.locator(f"#checkpoint-rows tr[data-checkpoint='{checkpoint_id}']")
    assert row.get_attribute("data-hf-status") == "ready", stack.logs_tail()
    keep_screenshot(page, shots, "import-converted")
    print(f"terminal run {run['id']}: {done}; imported: {imported}")
