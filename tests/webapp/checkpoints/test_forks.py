"""Fork a run from a checkpoint (``webapp.checkpoints.forks``, ``/checkpoints/<id>/fork/``): the
form holds the run's config resuming, a POST makes the user's queued run linked to its parent and
audited, bad input is refused with every error by its path and nothing written, and the launch
task links the checkpoint into the fork's own job dir. The real run of a fork: tests/core/runtime/test_fork.py
and tests/e2e/test_fork_and_evaluate.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from api_helpers import task_callbacks
from demo_rows import DEMO_YAML, audit, make_run

from rft_core.checkpoint.fork import FORK_META
from webapp.checkpoints.forks import fork_config_yaml
from webapp.experiments.config_policy import parse_yaml
from webapp.experiments.form_build import build_form
from webapp.experiments.form_merge import initial_post
from webapp.runs.fork_seed import seed_fork
from webapp.runs.models import Run, RunStatus

pytestmark = pytest.mark.django_db


def test_the_fork_page_holds_the_runs_config_resuming_from_the_checkpoint(client, alice, parent):
    run, checkpoint = parent
    client.force_login(alice)
    page = client.get(f"/checkpoints/{checkpoint.pk}/fork/").content.decode()
    assert "Fork run #1 from rft step 20" in page
    assert "steps go on from 21" in page
    assert "continue_from_checkpoint: true" in page
    assert "lr: 3e-5" in page or "lr: '3e-5'" in page or "3.0e-05" in page


def test_the_fork_page_is_the_experiment_form_with_the_checkpoint_as_its_start(
    client, alice, parent
):
    run, checkpoint = parent
    client.force_login(alice)
    page = client.get(f"/checkpoints/{checkpoint.pk}/fork/").content.decode()
    # the experiment form's fields and its YAML tab, prefilled from the parent's config
    assert 'id="fork-form" class="experiment-form' in page
    assert 'data-tab-target="form"' in page and 'data-tab-target="yaml"' in page
    assert 'name="buffer.total_steps"' in page and 'value="30"' in page
    assert re.search(
        r'name="continue_from_checkpoint">(?:(?!</select>).)*<option value="true" selected>',
        page,
        re.S,
    )
    assert f'id="fork-from" value="{checkpoint.path}" readonly' in page
    assert 'id="fork-from-step" value="rft step 20" readonly' in page


def test_a_fork_launched_from_the_forms_fields_changes_only_what_was_edited(
    client, alice, parent, settings, ray_head, django_capture_on_commit_callbacks
):
    settings.RAY_ADDRESS = ray_head.address
    run, checkpoint = parent
    form = build_form(parse_yaml(fork_config_yaml(checkpoint)))
    post = {**initial_post(form), "base_yaml": form.base_yaml, "source": "form"}
    post["buffer.total_steps"] = "40"  # the user's one edit, as the browser posts it
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(f"/checkpoints/{checkpoint.pk}/fork/", post)
    fork = Run.objects.get(experiment=run.experiment, number=2)
    assert response.status_code == 302 and response.url == f"/runs/{fork.pk}/"
    assert fork.config["buffer"]["total_steps"] == 40
    assert fork.config["continue_from_checkpoint"] is True
    parent_config = parse_yaml(run.config_yaml)
    assert fork.config["stages"] == parent_config["stages"]
    assert fork.config["algorithm"] == parent_config["algorithm"]
    assert (fork.fork_stage, fork.fork_step) == ("rft", 20)
    (row,) = audit("run.fork")
    assert row.after["checkpoint"] == checkpoint.pk


def test_a_refused_fork_from_the_form_shows_the_error_beside_its_field(client, alice, parent):
    run, checkpoint = parent
    form = build_form(parse_yaml(fork_config_yaml(checkpoint)))
    post = {**initial_post(form), "base_yaml": form.base_yaml, "source": "form"}
    post["buffer.batch_size"] = "-4"
    client.force_login(alice)
    response = client.post(f"/checkpoints/{checkpoint.pk}/fork/", post)
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-tab="form"' in page  # the form tab again, the typed value kept
    assert re.search(
        r'class="field[^"]*has-error[^"]*"[^>]*>.*?name="buffer.batch_size"', page, re.S
    )
    assert 'name="buffer.batch_size" value="-4"' in page
    assert Run.objects.count() == 1 and audit("run.fork") == []


def test_a_fork_is_the_users_queued_run_linked_to_its_parent_audited_and_enqueued(
    client, alice, parent, settings, ray_head, django_capture_on_commit_callbacks
):
    settings.RAY_ADDRESS = ray_head.address
    run, checkpoint = parent
    data = parse_yaml(run.config_yaml)
    data["algorithm"]["optimizer"]["lr"] = 1e-6
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(
            f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": yaml.safe_dump(data)}
        )
    fork = Run.objects.get(experiment=run.experiment, number=2)
    assert response.status_code == 302 and response.url == f"/runs/{fork.pk}/"
    assert fork.status == RunStatus.QUEUED and fork.launched_by == alice
    assert (fork.parent_id, fork.fork_stage, fork.fork_step) == (run.pk, "rft", 20)
    assert fork.config["algorithm"]["optimizer"]["lr"] == 1e-6
    assert len(task_callbacks(callbacks)) == 1  # the launch task, on commit
    (row,) = audit("run.fork")
    assert row.actor_name == "alice" and row.target_id == str(fork.pk)
    assert row.after["parent"] == run.pk and row.after["step"] == 20
    # the fork's page links its parent; the parent's lists the fork
    fork_page = client.get(f"/runs/{fork.pk}/").content.decode()
    assert f'href="/runs/{run.pk}/" id="fork-parent-link"' in fork_page
    assert "at rft step 20" in fork_page
    assert f"/runs/compare/?ids={run.pk},{fork.pk}" in fork_page
    parent_page = client.get(f"/runs/{run.pk}/").content.decode()
    assert f'<a href="/runs/{fork.pk}/" class="fork-child">run #2</a>' in parent_page


def test_a_fork_with_a_bad_value_is_refused_with_the_error_by_path_and_writes_nothing(
    client, alice, parent
):
    run, checkpoint = parent
    text = DEMO_YAML.replace("batch_size: 8", "batch_size: -4")
    client.force_login(alice)
    response = client.post(f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": text})
    assert response.status_code == 400
    page = response.content.decode()
    assert "buffer.batch_size" in page and "-4" in page
    assert Run.objects.count() == 1 and audit("run.fork") == []


def test_a_fork_that_drops_the_checkpoints_stage_or_resuming_is_refused(client, alice, parent):
    run, checkpoint = parent
    client.force_login(alice)
    no_stages = parse_yaml(run.config_yaml)
    no_stages.pop("stages")
    response = client.post(
        f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": yaml.safe_dump(no_stages)}
    )
    assert response.status_code == 400
    assert "stage &#x27;rft&#x27;, which the config does not have" in response.content.decode()
    fresh = parse_yaml(run.config_yaml)
    fresh["continue_from_checkpoint"] = False
    response = client.post(
        f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": yaml.safe_dump(fresh)}
    )
    assert response.status_code == 400 and "must be true in a fork" in response.content.decode()
    assert Run.objects.count() == 1


def test_a_checkpoint_gone_from_disk_cannot_be_forked(client, alice, parent):
    run, checkpoint = parent
    (Path(checkpoint.path) / ".full_checkpoint").unlink()
    client.force_login(alice)
    response = client.post(f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": run.config_yaml})
    assert response.status_code == 409
    assert "global_step_20 is not a full checkpoint" in response.content.decode()
    assert Run.objects.count() == 1


def test_another_user_can_neither_see_nor_fork_the_checkpoint(client, bob, parent):
    run, checkpoint = parent
    client.force_login(bob)
    assert client.get(f"/checkpoints/{checkpoint.pk}/fork/").status_code == 403
    response = client.post(f"/checkpoints/{checkpoint.pk}/fork/", {"config_yaml": run.config_yaml})
    assert response.status_code == 403
    assert Run.objects.count() == 1
    assert audit("permission.denied")[-1].after == {"attempted": "run.fork"}


def test_the_launch_task_links_the_checkpoint_into_the_forks_stage_job_dir(alice, parent, tmp_path):
    run, checkpoint = parent
    fork = make_run(
        run.experiment,
        number=2,
        parent=run,
        fork_stage="rft",
        fork_step=20,
        fork_from_path=checkpoint.path,
    )
    job_dir = tmp_path / "fork" / "demo" / "grpo_demo"
    seed_fork(fork, job_dir)
    linked = job_dir / "rft" / "global_step_20" / "actor" / "model_world_size_1_rank_0.pt"
    original = Path(checkpoint.path) / "actor" / "model_world_size_1_rank_0.pt"
    assert linked.read_bytes() == b"weights of step 20"
    assert linked.stat().st_ino == original.stat().st_ino  # a hard link, no copy
    assert (job_dir / "rft" / "latest_checkpointed_iteration.txt").read_text() == "20\n"
    meta = json.loads((job_dir / "rft" / FORK_META).read_text())
    assert meta == {"run": run.pk, "stage": "rft", "step": 20, "steps": [20]}
    # the SFT stage before it is marked finished: the rerun skips it
    stage_meta = json.loads((job_dir / "sft_warmup" / "stage_meta.json").read_text())
    assert stage_meta["finished"] is True
    seed_fork(fork, job_dir)  # a second delivery of the launch task changes nothing
    assert linked.stat().st_ino == original.stat().st_ino


def test_compare_overlays_a_fork_on_its_parent_from_the_fork_step(client, alice, parent):
    from webapp.runs.models import MetricPoint

    run, checkpoint = parent
    fork = make_run(run.experiment, number=2, parent=run, fork_stage="rft", fork_step=2)
    reward = "rollout/reward/mean"

    def points(target, steps_values):
        MetricPoint.objects.bulk_create(
            MetricPoint(run=target, name=reward, stage="rft", step=s, wall_time=1e9 + s, value=v)
            for s, v in steps_values
        )

    points(run, [(1, 0.1), (2, 0.2), (3, 0.3)])
    points(fork, [(3, 0.5), (4, 0.6)])
    client.force_login(alice)
    body = client.get(f"/runs/compare/data.json?ids={run.pk},{fork.pk}&names={reward}").json()
    by_id = {r["id"]: r for r in body["runs"]}
    # the fork's line starts at the parent's step-2 value, where it branched off
    forked = by_id[fork.pk]["metrics"][reward]
    assert forked["step"] == [2, 3, 4] and forked["value"] == [0.2, 0.5, 0.6]
    assert forked["wall_time"][0] is None  # borrowed from the parent, not logged by the fork
    assert by_id[fork.pk]["fork"] == {"parent": run.pk, "stage": "rft", "step": 2}
    assert by_id[run.pk]["metrics"][reward]["step"] == [1, 2, 3] and by_id[run.pk]["fork"] is None
    page = client.get(f"/runs/compare/?ids={run.pk},{fork.pk}").content.decode()
    assert "forked from #1 at rft step 2" in page
