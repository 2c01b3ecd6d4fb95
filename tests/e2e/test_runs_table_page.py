"""In Debian's chromium against the whole stack (daphne, the Celery worker, the event ingestor,
Redis, a Ray head): a run whose explorer reported a reward and an eval series through the real
monitor (into the stack's Redis stream, stored by its ingestor) is tagged from its page's tags
form; ``/runs/`` shows it alone when its tag is chosen in the table's tag filter (which applies
at once), with its latest reward; the run page's ``metrics.csv`` link downloads the eval series.
Screenshots go to ``$RFT_ARTIFACTS_DIR`` when it is set."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time

import pytest

from tests.e2e.conftest import ROOT
from tests.e2e.live_page import keep_screenshot, log_in

pytestmark = pytest.mark.browser

EVAL = "eval/arithmetic-eval/accuracy/mean@1"
SEED = """
import json
from django.contrib.auth import get_user_model
from webapp.experiments.models import Experiment
from webapp.runs.models import Run
owner = get_user_model().objects.get(username={username!r})
e = Experiment.objects.create(owner=owner, name={name!r}, config_yaml='', config={{}})
runs = [Run.objects.create(experiment=e, number=n, config_yaml='', status='running',
                           last_eval_accuracy=0.25 * n) for n in (1, 2, 3)]
print(json.dumps([[r.pk, r.key] for r in runs]))
"""
# the explorer's side: the product's monitor, streaming into the stack's Redis
REPORT = """
import os, tempfile
from rft_core.monitor import build_monitor
with build_monitor("none", {{}}, tempfile.mkdtemp(), role="explorer", run_name="t", stage="grpo") as m:
    for step in (2, 4, 6):
        m.log({{"rollout/reward/mean": step / 10}}, step=step)
        m.log({{{eval!r}: step / 10}}, step=step)
"""


def _python(stack, code: str, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, *code], cwd=ROOT, env={**stack.env, **env},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _table_ids(page) -> list[int]:
    return [int(x) for x in page.eval_on_selector_all("#runs-table tbody tr", "rs => rs.map(r => r.dataset.runId)")]  # fmt: skip


def test_runs_filters_by_a_tag_set_on_the_run_page_and_the_csv_downloads(
    page, stack, unique_id, tmp_path
):
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    name = f"runs-table-{unique_id}"
    seed = SEED.format(username=stack.username, name=name)
    seeded = json.loads(_python(stack, ["manage.py", "shell", "-c", seed]).splitlines()[-1])
    (tagged, key), *rest = seeded
    others = [pk for pk, _ in rest]
    _python(
        stack,
        ["-c", REPORT.format(eval=EVAL)],
        RFT_RUN_ID=key,
        RFT_HEARTBEAT_S="3600",
        RFT_EVENTS_REDIS_URL=stack.env["REDIS_URL"],
    )
    tag = f"sweep-{unique_id}"
    page.goto(f"{stack.url}/login/")
    log_in(page, stack)
    # the stack's ingestor stores the six points
    deadline = time.monotonic() + 60
    csv_url = f"{stack.url}/runs/{tagged}/metrics.csv"
    while page.request.get(csv_url).text().count(EVAL) < 3:
        stack.check_alive()
        assert time.monotonic() < deadline, stack.logs_tail()
        time.sleep(0.5)

    # tag one run from its page
    page.goto(f"{stack.url}/runs/{tagged}/")
    page.fill("#run-tags-input", f"{tag}, e2e")
    page.click("#tags-form button[type=submit]")
    page.wait_for_url(f"{stack.url}/runs/{tagged}/")
    assert page.locator(f"#tags-form a.tag[href='/runs/?tag={tag}']").count() == 1

    # the table lists all three of this experiment; choosing the tag applies the filter at once
    page.goto(f"{stack.url}/runs/?q={name}")
    assert sorted(_table_ids(page)) == sorted([tagged, *others])
    page.select_option("#runs-filters select[name=tag]", tag)
    page.wait_for_url(f"**/runs/?*tag={tag}*")
    assert _table_ids(page) == [tagged]
    row = page.locator(f"#runs-table tr[data-run-id='{tagged}']")
    assert tag in row.locator(".run-tags").inner_text()
    assert row.locator("td[data-field='reward']").inner_text() == "0.600"
    keep_screenshot(page, tmp_path, "runs-table-filtered-by-tag")
    # the other tag's link in the row filters by it
    row.locator("a.tag", has_text="e2e").click()
    page.wait_for_url("**/runs/?tag=e2e")
    assert tagged in _table_ids(page) and not set(others) & set(_table_ids(page))

    # the run page's metrics.csv link: every series, the eval one with its steps
    page.goto(f"{stack.url}/runs/{tagged}/")
    with page.expect_download() as download:
        page.click("#run-downloads a:text('metrics.csv')")
    path = tmp_path / "metrics.csv"
    download.value.save_as(path)
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    evals = [(r["stage"], int(r["step"]), float(r["value"])) for r in rows if r["name"] == EVAL]
    assert evals == [("grpo", 2, 0.2), ("grpo", 4, 0.4), ("grpo", 6, 0.6)]
    assert errors == []
