"""In Debian's chromium on the whole stack (daphne, a Celery worker, the ingestor, a Ray head,
Redis, one database): a short demo run (GRPO only, 3 steps, a checkpoint each step) succeeds;
from its step-2 row the user clicks Fork (the experiment form, prefilled from the parent, the
checkpoint as its start), sets one more step in the form and a new learning rate in its YAML tab,
and the fork runs as a run of its own that starts at step 3 with the step-2 weights and links to its
parent (which lists it); then the user evaluates two checkpoints of the parent on the demo's
eval taskset and sees the checkpoint x taskset table of accuracies, the best marked with its
Convert button. Screenshots go to the test's tmp dir (and ``$RFT_ARTIFACTS_DIR`` when set).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from live_page import keep_screenshot, log_in, wait_for_status

from rft_core.checkpoint.store import load_checkpoint

pytestmark = pytest.mark.browser
ROOT = Path(__file__).resolve().parents[2]

# A guard against a hung job, not a timing assertion.
GUARD_S = 400

CREATE = """
import json
from webapp.audit.record import Actor
from webapp.experiments.actions import create_experiment
from django.contrib.auth import get_user_model
user = get_user_model().objects.get(username={username!r})
e = create_experiment(Actor(user=user), name="fork-me", config_yaml={config!r})
print(json.dumps({{"experiment": e.pk}}))
"""


def _short_demo_yaml() -> str:
    """The demo's config cut to a quick CPU run: GRPO only, 3 steps of 4 tasks x 2 samples,
    8 response tokens, a checkpoint each step, no evaluation during the run."""
    data = yaml.safe_load((ROOT / "examples" / "demo" / "grpo_demo.yaml").read_text())
    data.pop("stages")
    data["algorithm"]["repeat_times"] = 2
    data["model"]["max_response_tokens"] = 8
    data["buffer"].update(batch_size=4, total_steps=3)
    data["explorer"].update(eval_on_startup=False, eval_interval=1000)
    data["trainer"].update(
        save_interval=1, save_hf_checkpoint="never", max_checkpoints_to_keep=0
    )  # keep all: it forks from step 2
    return yaml.safe_dump(data, sort_keys=False)


def _job_dir(stack, run_pk: int) -> Path:
    found = [p for p in Path(stack.env["RFT_RUNS_DIR"]).rglob(f"run-{run_pk}") if p.is_dir()]
    assert len(found) == 1, found
    return found[0] / "demo" / "grpo_demo"


def _steps(job_dir: Path, role: str) -> list[int]:
    path = job_dir / "monitor" / f"{role}_metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _run_pk(page) -> int:
    return int(re.search(r"/runs/(\d+)/", page.url).group(1))


def test_a_user_forks_a_run_from_a_checkpoint_and_evaluates_two_checkpoints(
    page, stack, tmp_path: Path
):
    page.set_default_timeout(30_000)
    page.goto(f"{stack.url}/experiments/")
    log_in(page, stack)
    code = CREATE.format(username=stack.username, config=_short_demo_yaml())
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env=stack.env,
        check=True,
        capture_output=True,
        text=True,
    )
    experiment = json.loads(done.stdout.strip().splitlines()[-1])
    page.goto(f"{stack.url}/experiments/{experiment['experiment']}/")
    with page.expect_navigation():
        page.click("#launch")
    assert re.search(r"/runs/\d+/$", page.url), page.locator("main").inner_text()[:2000]
    parent_pk = _run_pk(page)
    assert wait_for_status(page, stack, {"succeeded"}, GUARD_S) == "succeeded"
    parent_dir = _job_dir(stack, parent_pk)
    assert _steps(parent_dir, "trainer") == [1, 2, 3]

    # Fork from the step-2 row: the fork page holds the run's config, resuming
    page.goto(f"{stack.url}/runs/{parent_pk}/")
    fork_link = page.locator("#checkpoint-rows tr[data-step='2'] a.fork")
    try:
        fork_link.wait_for(timeout=90_000)  # the rows come with the page's live snapshot
    except Exception as err:
        rows = page.locator("#checkpoint-rows").inner_html()
        raise AssertionError(f"no Fork link on step 2: {rows}\n{stack.logs_tail()}") from err
    fork_link.click()
    page.wait_for_url(f"{stack.url}/checkpoints/*/fork/")
    assert "steps go on from 3" in page.locator("#fork-explained").inner_text()
    # the experiment form, prefilled from the parent, with the checkpoint as its start
    assert page.locator("#fork-from").input_value().endswith("global_step_2")
    assert page.locator("#fork-from-step").input_value() == "step 2"
    assert page.locator("[name='continue_from_checkpoint']").input_value() == "true"
    assert page.locator("[name='buffer.total_steps']").input_value() == "3"
    # one more step, typed in the form's field; then the YAML tab shows the merged config
    page.fill("[name='buffer.total_steps']", "4")
    page.click("[data-tab-target=yaml]")
    page.wait_for_selector("[data-tab-panel=yaml]:not([hidden])")
    text = page.locator("#config-yaml").input_value()
    assert "continue_from_checkpoint: true" in text
    # new hyperparameters: lr 1e-30 (an Adam step of ~lr cannot move float32 weights of ~1e-2,
    # so the fork's step-3 weights must be the step-2 checkpoint's), set in the YAML tab
    data = yaml.safe_load(text)
    assert data["buffer"]["total_steps"] == 4
    data["algorithm"]["optimizer"]["lr"] = 1e-30
    page.fill("#config-yaml", yaml.safe_dump(data, sort_keys=False))
    keep_screenshot(page, tmp_path, "fork_form_yaml_tab")
    # back to the form: the YAML's lr shows in its field, and the fork launches from there
    page.click("[data-tab-target=form]")
    page.wait_for_selector("[data-tab-panel=form]:not([hidden])")
    assert float(page.locator("[name='algorithm.optimizer.lr']").input_value()) == 1e-30
    assert page.locator("[name='buffer.total_steps']").input_value() == "4"
    keep_screenshot(page, tmp_path, "fork_form")
    with page.expect_navigation():
        page.click("#fork-launch")
    assert re.search(r"/runs/\d+/$", page.url), page.locator("main").inner_text()[:2000]
    fork_pk = _run_pk(page)
    assert fork_pk != parent_pk
    assert wait_for_status(page, stack, {"succeeded"}, GUARD_S) == "succeeded"
    link = page.locator("#fork-parent-link")
    assert link.get_attribute("href") == f"/runs/{parent_pk}/"
    assert "at step 2" in page.locator("#fork-parent").inner_text()
    fork_dir = _job_dir(stack, fork_pk)
    assert fork_dir != parent_dir
    assert _steps(fork_dir, "trainer") == [3, 4]  # the step counter went on from the checkpoint
    name = "model.layers.0.self_attn.q_proj.weight"
    parent2 = load_checkpoint(parent_dir, 2).state_dict[name]
    fork3 = load_checkpoint(fork_dir, 3)
    assert torch.equal(fork3.state_dict[name], parent2)
    assert not torch.equal(load_checkpoint(parent_dir, 3).state_dict[name], parent2)
    assert max(s["step"] for s in fork3.optimizer_state["state"].values()) == 3
    keep_screenshot(page, tmp_path, "fork_run_page")

    # the parent lists its fork
    link.click()
    page.wait_for_url(f"{stack.url}/runs/{parent_pk}/")
    assert "from step 2" in page.locator("#fork-children").inner_text()
    assert page.locator(f"#fork-children a[href='/runs/{fork_pk}/']").count() == 1

    # Evaluate steps 1 and 3 of the parent on the demo's eval taskset
    page.click("#evaluate-link")
    page.wait_for_url(f"{stack.url}/runs/{parent_pk}/evaluations/")
    for step in (1, 3):
        page.check(f"#evaluate-form input[name=checkpoint][data-step='{step}']")
    assert page.locator("#evaluate-form input[name=taskset][value='arithmetic-eval']").is_checked()
    page.click("#evaluate-launch")
    page.wait_for_url(f"{stack.url}/runs/{parent_pk}/evaluations/*")
    section = page.locator("section.evaluation").first
    deadline = time.monotonic() + GUARD_S
    while section.get_attribute("data-status") not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, stack.logs_tail()
        stack.check_alive()
        time.sleep(2)
        page.reload()
        section = page.locator("section.evaluation").first
    assert section.get_attribute("data-status") == "succeeded", section.inner_text()
    rows = section.locator("tbody tr[data-step]")  # a note row may follow a row
    assert rows.count() == 2
    assert [rows.nth(i).get_attribute("data-step") for i in range(2)] == ["1", "3"]
    shown = [float(rows.nth(i).locator("td.accuracy").inner_text()) for i in range(2)]
    assert all(0.0 <= v <= 1.0 for v in shown)
    # the table holds what the bench job logged, step by step
    bench = next(Path(stack.env["RFT_RUNS_DIR"]).rglob("run-eval-*")) / "demo" / "grpo_demo"
    logged = {
        row["step"]: row["bench/arithmetic-eval/accuracy/mean@1"]
        for row in map(json.loads, (bench / "monitor" / "explorer_metrics.jsonl").open())
        if "bench/arithmetic-eval/accuracy/mean@1" in row
    }
    assert sorted(logged) == [1, 3]
    assert all(abs(v - logged[s]) <= 0.0005 + 1e-9 for v, s in zip(shown, (1, 3), strict=True))
    best = section.locator("tr[data-best=true]")
    assert best.count() == 1
    best_step = int(best.get_attribute("data-step"))
    assert logged[best_step] == max(logged.values())
    assert best.locator("button.convert-best").count() == 1
    keep_screenshot(page, tmp_path, "evaluation_table")
