"""Run pages and the launch/cancel actions as a browser meets them: the run page, the compare
page, POST launch/cancel/clone, who may do what (404 missing, 403 + audit row for another user's
run) and the refusals (Ray or Redis down, a config that no longer passes: a 4xx, nothing written).

Launch is checked up to the Celery hand-off (the enqueue is captured, not run): the worker and
Ray side is tests/workers/test_launch_ray.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from api_helpers import task_callbacks
from demo_rows import DEMO_YAML, audit, make_experiment, make_run
from django.contrib.auth import get_user_model

from webapp.audit.record import Actor
from webapp.experiments.config_policy import parse_yaml
from webapp.experiments.models import Experiment
from webapp.runs import actions
from webapp.runs.models import Run, RunStatus
from workers.services import free_port

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[3]
# ---------------------------------------------------------------- launch


def test_it_launches_a_queued_run_with_the_next_number_and_enqueues_after_commit(
    client, alice, roots, settings, ray_head, django_capture_on_commit_callbacks
):
    settings.RAY_ADDRESS = ray_head.address
    experiment = make_experiment(alice)
    make_run(experiment, number=1, status=RunStatus.SUCCEEDED)
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(f"/runs/launch/{experiment.pk}/")
    run = Run.objects.get(experiment=experiment, number=2)
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    assert run.status == RunStatus.QUEUED
    assert run.launched_by == alice and run.experiment_version == experiment.version
    assert parse_yaml(run.config_yaml) == run.config == parse_yaml(DEMO_YAML)
    assert run.celery_task_id  # the launch task is sent with this id
    assert len(task_callbacks(callbacks)) == 1  # enqueued on commit, not before
    experiment.refresh_from_db()
    assert experiment.last_run_id == run.pk
    (row,) = audit("run.launch")
    assert row.actor_name == "alice" and row.target_type == "run" and row.target_id == str(run.pk)


def test_it_refuses_a_launch_while_rays_job_server_is_down_with_409_and_writes_nothing(
    client, alice, roots, settings
):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    experiment = make_experiment(alice)
    client.force_login(alice)
    response = client.post(f"/runs/launch/{experiment.pk}/")
    assert response.status_code == 409
    text = response.content.decode()
    assert "Ray&#x27;s job server at " + settings.RAY_ADDRESS in text
    assert "ray start --head" in text  # how to start it
    assert f'href="/experiments/{experiment.pk}/"' in text  # the way back
    assert Run.objects.count() == 0 and audit("run.launch") == []


def test_it_refuses_a_launch_while_redis_is_down_with_409_naming_it(client, alice, roots, settings):
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    experiment = make_experiment(alice)
    client.force_login(alice)
    response = client.post(f"/runs/launch/{experiment.pk}/")
    assert response.status_code == 409
    assert "Celery broker (Redis) is down" in response.content.decode()
    assert Run.objects.count() == 0


def test_it_refuses_a_launch_whose_config_no_longer_passes_the_checks(
    client, alice, roots, settings, ray_head
):
    settings.RAY_ADDRESS = ray_head.address
    text = DEMO_YAML.replace(
        "model_path: ${oc.env:RFT_DEMO_DIR,./var/demo}/model", "model_path: /etc"
    )
    experiment = make_experiment(alice, text=text)
    client.force_login(alice)
    response = client.post(f"/runs/launch/{experiment.pk}/")
    assert response.status_code == 400
    page = response.content.decode()
    assert "model.model_path" in page and "outside the allowed roots" in page
    assert Run.objects.count() == 0


def test_it_refuses_a_launch_of_another_users_experiment_with_403_and_audits_it(
    client, alice, bob, roots
):
    experiment = make_experiment(alice)
    client.force_login(bob)
    assert client.post(f"/runs/launch/{experiment.pk}/").status_code == 403
    assert client.post("/runs/launch/999999/").status_code == 404
    assert client.get(f"/runs/launch/{experiment.pk}/").status_code == 405
    assert Run.objects.count() == 0
    (denied,) = audit("permission.denied")
    assert denied.actor_name == "bob" and denied.target_id == str(experiment.pk)


# ---------------------------------------------------------------- cancel


def test_cancelling_a_queued_run_cancels_it_at_once_and_it_never_submits(
    client, alice, roots, settings
):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"  # a submission would fail loudly
    run = make_run(make_experiment(alice))
    client.force_login(alice)
    response = client.post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == 302 and response.url == f"/runs/{run.pk}/"
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED and run.finished_at is not None
    assert run.exit_reason == "cancelled by alice before it started"
    # the launch task arrives late: it leaves the run alone
    assert actions.start_run(run.pk).status == RunStatus.CANCELLED
    run.refresh_from_db()
    assert run.submission_id == "" and run.job_dir == "" and run.status == RunStatus.CANCELLED
    assert not roots[1].exists()  # no launch config written
    (row,) = audit("run.cancel")
    assert row.before == {"status": "queued"} and row.after == {"status": "cancelled"}


def test_cancelling_a_running_run_requests_it_and_enqueues_the_stop(
    client, alice, roots, django_capture_on_commit_callbacks
):
    run = make_run(make_experiment(alice), status=RunStatus.RUNNING, submission_id="rft-x")
    client.force_login(alice)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert client.post(f"/runs/{run.pk}/cancel/").status_code == 302
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.cancel_requested_at is not None
    assert len(task_callbacks(callbacks)) == 1
    # a second click neither enqueues again nor writes a second audit row
    with django_capture_on_commit_callbacks(execute=False) as again:
        assert client.post(f"/runs/{run.pk}/cancel/").status_code == 302
    assert len(again) == 0 and len(audit("run.cancel")) == 1
    assert b"Cancel requested" in client.get(f"/runs/{run.pk}/").content


def test_it_refuses_to_cancel_a_finished_run_with_409(client, alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.SUCCEEDED)
    client.force_login(alice)
    response = client.post(f"/runs/{run.pk}/cancel/")
    assert response.status_code == 409
    assert "has already succeeded" in response.content.decode()
    assert audit("run.cancel") == []


def test_it_refuses_to_cancel_another_users_run_with_403(client, alice, bob, roots):
    run = make_run(make_experiment(alice))
    client.force_login(bob)
    assert client.post(f"/runs/{run.pk}/cancel/").status_code == 403
    run.refresh_from_db()
    assert run.status == RunStatus.QUEUED


def test_a_run_whose_submission_fails_becomes_failed_with_the_reason(alice, roots, settings):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"  # went down after the launch checks
    run = make_run(make_experiment(alice))
    actions.start_run(run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.FAILED and run.finished_at is not None
    assert run.exit_reason.startswith("the Ray job could not be submitted: Ray's job server at")
    assert run.submission_id == ""
    (row,) = audit("run.status")
    assert row.before == {"status": "starting"} and row.after["status"] == "failed"


def test_the_launch_config_gets_the_runs_own_checkpoint_root_and_absolute_paths(
    alice, roots, settings
):
    from webapp.experiments.config_policy import check_config
    from webapp.runs.claims import runs_area
    from webapp.runs.snapshot import launch_spec

    demo, runs = roots
    settings.RFT_WORK_DIR = demo.parent
    text = DEMO_YAML.replace("${oc.env:RFT_DEMO_DIR,./var/demo}/gsm8k", "demo/gsm8k")
    checked = check_config(config_yaml=text)
    area = runs_area(alice)
    assert area == runs / "users" / str(alice.pk)
    one, two = (launch_spec(checked.data, checked.config, pk, area) for pk in (7, 8))
    root = area / "checkpoints"  # a relative root: under the owner's runs area
    assert one.run_root == root / "run-7"
    assert one.job_dir == root / "run-7" / "demo" / "grpo_demo"
    assert two.job_dir != one.job_dir
    config = one.config
    assert config["checkpoint_root_dir"] == str(root / "run-7")
    assert config["model"]["model_path"] == str(demo / "model")  # ${oc.env:...} resolved
    assert config["buffer"]["explorer_input"]["taskset"]["path"] == str(demo / "gsm8k")
    sft = config["stages"][0]["buffer"]["trainer_input"]["experience_buffer"]["path"]
    assert sft == str(demo / "sft" / "train.jsonl")  # a stage's dataset too
    mirror = config["buffer"]["trainer_input"]["experience_buffer"]["path"]
    assert mirror == "sqlite:///demo.db"  # a queue mirror stays under the job dir
    assert config["algorithm"] == checked.data["algorithm"]  # the rest as written
    assert yaml.safe_load(one.yaml()) == config


# ---------------------------------------------------------------- clone


def test_clone_config_makes_a_new_experiment_of_the_clicking_user_from_the_snapshot(
    client, alice, roots
):
    experiment = make_experiment(alice)
    snapshot = parse_yaml(DEMO_YAML)
    snapshot["buffer"]["batch_size"] = 3  # the experiment changed since this run
    run = make_run(experiment, status=RunStatus.SUCCEEDED, config=snapshot)
    client.force_login(alice)
    response = client.post(f"/runs/{run.pk}/clone/")
    clone = Experiment.objects.exclude(pk=experiment.pk).get()
    assert response.status_code == 302 and response.url == f"/experiments/{clone.pk}/"
    assert clone.owner == alice and clone.config["buffer"]["batch_size"] == 3


def test_clone_of_another_users_run_is_403(client, alice, bob, roots):
    run = make_run(make_experiment(alice))
    client.force_login(bob)
    assert client.post(f"/runs/{run.pk}/clone/").status_code == 403
    assert Experiment.objects.count() == 1


# ---------------------------------------------------------------- run page


def test_the_run_page_shows_status_times_snapshot_job_dir_and_the_error(client, alice, roots):
    run = make_run(
        make_experiment(alice),
        status=RunStatus.FAILED,
        submission_id="rft-r123",
        job_dir="/data/runs/run-7/demo/grpo_demo",
        exit_reason="the job's driver was killed by signal 9 (exit code -9)",
        last_error="ValueError: boom",
        stage="rft",
        step=4,
    )
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'data-status="failed"' in page
    for text in (
        "rft-r123",
        "/data/runs/run-7/demo/grpo_demo",
        "killed by signal 9",
        "ValueError: boom",
        '<span id="run-step">4</span>',  # the step, before the live client ticks
        "algorithm_type: grpo",  # the snapshot
        f'action="/runs/{run.pk}/clone/"',
    ):
        assert text in page, text
    # nothing to cancel: the form is there for the live client, hidden
    assert re.search(rf'action="/runs/{run.pk}/cancel/"[^>]*\bhidden\b', page)


def test_the_run_page_offers_cancel_while_the_run_is_active(client, alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.STARTING)
    client.force_login(alice)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert re.search(rf'action="/runs/{run.pk}/cancel/" class="inline" id="cancel-form" >', page)


def test_the_run_page_of_another_users_run_is_403_and_audited_and_a_missing_one_404(
    client, alice, bob, roots
):
    run = make_run(make_experiment(alice))
    client.force_login(bob)
    assert client.get(f"/runs/{run.pk}/").status_code == 403
    assert client.get("/runs/999999/").status_code == 404
    (denied,) = audit("permission.denied")
    assert denied.target_type == "run" and denied.target_id == str(run.pk)
    staff = get_user_model().objects.create_user("root", password="x" * 12, is_staff=True)
    client.force_login(staff)
    assert client.get(f"/runs/{run.pk}/").status_code == 200


# ---------------------------------------------------------------- compare


def test_compare_lists_only_the_config_paths_whose_values_differ(client, alice, roots):
    experiment = make_experiment(alice)
    base = parse_yaml(DEMO_YAML)
    other = parse_yaml(DEMO_YAML)
    other["buffer"]["batch_size"] = 16
    other["stages"][0]["buffer"]["total_steps"] = 50
    del other["explorer"]["eval_on_startup"]
    one = make_run(experiment, 1, config=base)
    two = make_run(experiment, 2, config=other)
    client.force_login(alice)
    response = client.get(f"/runs/compare/?ids={one.pk},{two.pk}")
    assert response.status_code == 200
    rows = [(r.path, r.values) for r in response.context["rows"]]
    assert rows == [
        ("buffer.batch_size", ["8", "16"]),
        ("explorer.eval_on_startup", ["true", ""]),
        ("stages[0].buffer.total_steps", ["500", "50"]),
    ]
    assert "model.model_path" not in response.content.decode()  # equal: left out


def test_compare_refuses_bad_ids_with_400(client, alice, roots):
    run = make_run(make_experiment(alice))
    client.force_login(alice)
    for query in ("", "?ids=", f"?ids={run.pk}", f"?ids={run.pk},x", f"?ids={run.pk},-2"):
        response = client.get(f"/runs/compare/{query}")
        assert response.status_code == 400, query
        assert "ids:" in response.content.decode()


def test_compare_with_another_users_run_is_403_and_a_missing_one_404(client, alice, bob, roots):
    mine = make_run(make_experiment(bob, name="b"))
    theirs = make_run(make_experiment(alice))
    client.force_login(bob)
    assert client.get(f"/runs/compare/?ids={mine.pk},{theirs.pk}").status_code == 403
    assert client.get(f"/runs/compare/?ids={mine.pk},999999").status_code == 404


# ---------------------------------------------------------------- what the ingestor observes


def test_the_first_heartbeat_makes_a_starting_run_running(alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.STARTING)
    actions.observe_heartbeat(run, 1_800_000_000.0)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert run.started_at.timestamp() == run.last_heartbeat.timestamp() == 1_800_000_000.0
    actions.observe_heartbeat(run, 1_700_000_000.0)  # an older one arriving late
    run.refresh_from_db()
    assert run.last_heartbeat.timestamp() == 1_800_000_000.0


def test_a_roles_failed_status_keeps_its_message_and_finished_does_not_end_the_run(alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.STARTING)
    actions.observe_status(run, "running", "trainer started", 1_800_000_000.0, stage="sft_warmup")
    actions.observe_status(run, "finished", "trainer finished at step 3", 1_800_000_001.0)
    run.refresh_from_db()
    assert (run.status, run.stage) == (RunStatus.RUNNING, "sft_warmup")
    actions.observe_status(run, "failed", "explorer: RuntimeError: engine died", 1_800_000_002.0)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING  # the Ray job's end decides
    assert run.last_error == "explorer: RuntimeError: engine died"


def test_progress_keeps_the_furthest_step_of_the_current_stage(alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.RUNNING)
    actions.observe_progress(run, stage="sft_warmup", step=5, total_steps=450)
    actions.observe_progress(run, stage="sft_warmup", step=3)
    run.refresh_from_db()
    assert (run.stage, run.step, run.total_steps) == ("sft_warmup", 5, 450)
    actions.observe_progress(run, stage="rft", step=1)
    run.refresh_from_db()
    # the new stage's total comes from the launch config, never the SFT stage's 300
    assert (run.stage, run.step, run.total_steps) == ("rft", 1, run.config["buffer"]["total_steps"])


def test_progress_takes_each_stages_total_from_the_launch_config(alice, roots):
    config = {
        "buffer": {"total_steps": 30},
        "stages": [
            {"stage_name": "sft_warmup", "buffer": {"total_steps": 300, "train_batch_size": 32}},
            {"stage_name": "rft"},  # no buffer of its own: the global one
            {"stage_name": "by_epochs", "buffer": {"total_epochs": 1}},  # replaces it, no total
        ],
    }
    run = make_run(make_experiment(alice), status=RunStatus.RUNNING, config=config)
    for stage, total in (("sft_warmup", 300), ("rft", 30), ("by_epochs", None)):
        actions.observe_progress(run, stage=stage, step=2)
        run.refresh_from_db()
        assert (run.stage, run.step, run.total_steps) == (stage, 2, total)


def test_a_lost_run_whose_heartbeats_resume_is_running_again(alice, roots):
    run = make_run(make_experiment(alice), status=RunStatus.RUNNING, submission_id="rft-x")
    actions.finish_run(run, RunStatus.LOST, "no heartbeat for 130 s")
    run.refresh_from_db()
    actions.observe_heartbeat(run, run.finished_at.timestamp() + 5)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING and run.finished_at is None and run.exit_reason == ""
    assert [e.after["status"] for e in audit("run.status")] == ["lost", "running"]
    assert Actor.system().name == audit("run.status")[0].actor_name
