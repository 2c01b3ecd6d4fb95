"""The README's second curl session (*The JSON API*: tag a run, note why, evaluate its
checkpoints still on disk, fork the last one with a lower learning rate) run as written, with
curl and jq, against a live server: what it prints and what it wrote."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from api_helpers import make_user
from demo_rows import full_checkpoint, make_experiment, make_run
from django.conf import settings as django_settings

from webapp.accounts.models import ApiToken
from webapp.checkpoints.actions import sync_checkpoints
from webapp.checkpoints.models import Evaluation
from webapp.runs.models import Run, RunStatus

README = Path(django_settings.BASE_DIR) / "README.md"


def readme_session() -> str:
    """The bash block after "Then tag the run" in the README's API section."""
    text = README.read_text()
    after = text[text.index("Then tag the run, note why") :]
    return re.search(r"```bash\n(.*?)```", after, re.S).group(1)


@pytest.mark.django_db(transaction=True)
def test_the_readmes_curl_session_tags_evaluates_and_forks(live_server, roots, settings, ray_head):
    settings.RAY_ADDRESS = ray_head.address
    _, runs = roots
    alice = make_user("alice")
    job_dir = runs / "users" / str(alice.pk) / "checkpoints" / "run-1" / "demo" / "grpo_demo"
    run = make_run(make_experiment(alice), status=RunStatus.SUCCEEDED, job_dir=str(job_dir))
    for step in (10, 20, 30):
        full_checkpoint(job_dir / "rft", step)
    rows = {c.step: c for c in sync_checkpoints(run)}
    shutil.rmtree(job_dir / "rft" / "global_step_10")  # as retention deletes it
    sync_checkpoints(run)
    _, token = ApiToken.issue(alice, "readme")
    script = "set -euo pipefail\n"
    script += (
        'auth=(-H "Authorization: Bearer $TOKEN"); json=(-H "Content-Type: application/json")\n'
    )
    script += readme_session()
    env = {**os.environ, "TOKEN": token, "BASE": live_server.url, "RUN": str(run.pk)}
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr + done.stdout
    tagged, evaluated, forked = (json.loads(line) for line in done.stdout.splitlines())
    assert tagged == {"tags": ["baseline"], "notes": "reward flat after step 20"}
    evaluation = Evaluation.objects.get(pk=evaluated["id"])
    assert evaluated["status"] == "queued"
    assert sorted(c.step for c in evaluation.checkpoints.all()) == [20, 30]  # not the pruned 10
    fork = Run.objects.get(pk=forked["id"])
    assert (forked["number"], forked["status"]) == (2, "queued")
    assert (fork.parent_id, fork.fork_stage, fork.fork_step) == (run.pk, "rft", 30)
    assert fork.config["algorithm"]["optimizer"]["lr"] == 1e-6
    assert fork.fork_from_path == rows[30].path
