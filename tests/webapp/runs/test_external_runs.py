"""Runs started outside the dashboard (webapp/runs/external.py, webapp/ingest/job_dir.py): a
terminal's ``trinity run`` registering itself and reporting its end through the API, and a job
dir imported with its whole history. The job dirs here are written by rft_core's own writers (JsonlSink, log_to_file)."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from rft_core.checkpoint import layout
from rft_core.monitor.events import MonitorEvent
from tests.webapp.api_helpers import make_experiment, make_user, token_client
from tests.webapp.job_dirs import CONFIG, write_job_dir
from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint
from webapp.events.models import RunEvent
from webapp.experiments.models import Experiment
from webapp.runs.actions import reconcile_run
from webapp.runs.claims import runs_area
from webapp.runs.models import LogLine, MetricPoint, RolloutSample, Run, RunOrigin, RunStatus

pytestmark = pytest.mark.django_db


def post(client, url: str, body: dict):
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def alice_api(alice):
    return token_client(alice)[0]


@pytest.fixture
def area(roots, alice):
    """Alice's runs area (webapp.runs.claims): the job dirs she may claim."""
    return runs_area(alice)


# ---------------------------------------------------------------- terminal registration


def test_a_terminal_run_registers_under_the_experiment_named_as_its_config(
    area, alice, alice_api, settings
):
    job_dir = area / "terminal-proj" / "from-terminal"
    answer = post(alice_api, "/api/v1/runs/register/", {"config_yaml": CONFIG,
                                                         "job_dir": str(job_dir)})  # fmt: skip
    assert answer.status_code == 201, answer.content
    body = answer.json()
    run = Run.objects.get(pk=body["run"]["id"])
    assert (run.origin, run.status, run.job_dir) == (RunOrigin.TERMINAL, "running", str(job_dir))
    assert run.experiment.owner == alice and run.experiment.name == "from-terminal"
    assert run.experiment.project == "terminal-proj"
    assert body["key"] == run.key and body["events_redis_url"].startswith("redis://")
    assert body["events_redis_prefix"] == settings.RFT_REDIS_PREFIX  # the stream's deployment
    assert body["page"].endswith(f"/runs/{run.pk}/")
    assert AuditEvent.objects.filter(action="run.register", target_id=str(run.pk)).exists()
    # a second run of the same config goes under the same experiment, as run 2
    again = post(alice_api, "/api/v1/runs/register/", {"config_yaml": CONFIG,
                                                        "job_dir": str(job_dir)})  # fmt: skip
    second = Run.objects.get(pk=again.json()["run"]["id"])
    assert (second.experiment_id, second.number) == (run.experiment_id, 2)
    assert Experiment.objects.filter(owner=alice).count() == 1


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"config_yaml": CONFIG, "job_dir": "relative/dir"}, "job_dir", "absolute path"),
        ({"config_yaml": "name: [unclosed", "job_dir": "/x"}, None, "YAML"),
        ({"config_yaml": "mode: sideways\n", "job_dir": "/x"}, "mode", "sideways"),
        ({"job_dir": "/x"}, "config_yaml", "required"),
    ],
)
def test_a_bad_registration_is_a_400_naming_the_field_and_writes_nothing(
    roots, alice_api, body, field, words
):
    audit_before = AuditEvent.objects.count()
    answer = post(alice_api, "/api/v1/runs/register/", body)
    assert answer.status_code == 400, answer.content
    text = json.dumps(answer.json())
    assert words in text
    if field:
        assert field in text
    assert Run.objects.count() == Experiment.objects.count() == 0
    assert AuditEvent.objects.count() == audit_before


def test_registering_needs_a_token_or_a_session():
    answer = post(__import__("django.test").test.Client(), "/api/v1/runs/register/", {})
    assert answer.status_code in (401, 403)
    assert Run.objects.count() == 0


def _register(client, area) -> Run:
    job_dir = area / "terminal-proj" / "from-terminal"
    answer = post(client, "/api/v1/runs/register/", {"config_yaml": CONFIG,
                                                      "job_dir": str(job_dir)})  # fmt: skip
    return Run.objects.get(pk=answer.json()["run"]["id"])


@pytest.mark.parametrize(
    ("exit_code", "status", "reason"),
    [(0, "succeeded", "exited 0"), (1, "failed", "exited 1"), (130, "cancelled", "Ctrl-C")],
)
def test_the_clis_exit_report_ends_the_run(area, alice_api, exit_code, status, reason):
    run = _register(alice_api, area)
    answer = post(alice_api, f"/api/v1/runs/{run.pk}/finish/",
                  {"exit_code": exit_code, "message": "ValueError: boom"})  # fmt: skip
    assert answer.status_code == 200, answer.content
    run.refresh_from_db()
    assert run.status == status and reason in run.exit_reason
    assert run.finished_at is not None
    assert (run.last_error == "ValueError: boom") == (status == "failed")
    assert AuditEvent.objects.filter(action="run.finish", target_id=str(run.pk)).exists()
    # a second report changes nothing
    post(alice_api, f"/api/v1/runs/{run.pk}/finish/", {"exit_code": 3})
    run.refresh_from_db()
    assert run.status == status


def test_another_users_report_is_refused_and_audited(area, alice_api):
    run = _register(alice_api, area)
    bob_api = token_client(make_user("bob"))[0]
    answer = post(bob_api, f"/api/v1/runs/{run.pk}/finish/", {"exit_code": 0})
    assert answer.status_code == 404  # another user's run is answered as a missing one
    run.refresh_from_db()
    assert run.status == "running"
    assert AuditEvent.objects.filter(action="permission.denied", target_id=str(run.pk)).exists()


def test_a_bad_exit_report_is_a_400_and_a_dashboard_run_is_not_finished_from_outside(
    area, alice, alice_api
):
    run = _register(alice_api, area)
    answer = post(alice_api, f"/api/v1/runs/{run.pk}/finish/", {"exit_code": "zero"})
    assert answer.status_code == 400 and "exit_code" in answer.content.decode()
    launched = Run.objects.create(experiment=make_experiment(alice, "mine"), number=1,
                                  status=RunStatus.RUNNING, config_yaml="")  # fmt: skip
    answer = post(alice_api, f"/api/v1/runs/{launched.pk}/finish/", {"exit_code": 0})
    assert answer.status_code == 409 and "terminal" in answer.json()["detail"]


def test_a_terminal_run_cannot_be_cancelled_from_the_dashboard(area, alice_api):
    run = _register(alice_api, area)
    answer = alice_api.post(f"/api/v1/runs/{run.pk}/cancel/")
    assert answer.status_code == 409 and "terminal" in answer.json()["detail"]
    run.refresh_from_db()
    assert run.status == "running" and run.cancel_requested_at is None


def test_a_silent_terminal_run_is_lost_after_the_heartbeat_timeout(area, alice_api, settings):
    run = _register(alice_api, area)
    assert not reconcile_run(run)  # no Ray job to ask: a fresh run stays running
    Run.objects.filter(pk=run.pk).update(
        last_heartbeat=timezone.now() - timedelta(seconds=settings.RFT_HEARTBEAT_TIMEOUT_S + 5)
    )
    run.refresh_from_db()
    assert reconcile_run(run)
    run.refresh_from_db()
    assert run.status == "lost" and "no heartbeat" in run.exit_reason


def test_a_terminal_runs_checkpoint_outside_its_job_dir_is_ignored(area, alice_api, tmp_path):
    from webapp.ingest.projection import project
    from webapp.ingest.store import rows_of, store_events

    run = _register(alice_api, area)
    inside = layout.step_dir(area / "terminal-proj" / "from-terminal", 4)
    events = [
        ("1-0", MonitorEvent(run.key, "checkpoint", "trainer", 4, {"path": str(inside)})),
        ("2-0", MonitorEvent(run.key, "checkpoint", "trainer", 5, {"path": "/etc/global_step_5"})),
    ]
    store_events(run.key, rows_of(run.key, events))
    assert list(Checkpoint.objects.filter(run=run).values_list("step", flat=True)) == [4]
    assert project  # the projection the store called


# ---------------------------------------------------------------- importing a job dir


def test_a_job_dir_is_imported_with_its_whole_history(area, alice, alice_api):
    job_dir = area / "old-proj" / "old-run"
    ckpt = write_job_dir(job_dir)
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir)})
    assert answer.status_code == 201, answer.content
    run = Run.objects.get(pk=answer.json()["id"])
    assert (run.origin, run.status) == (RunOrigin.IMPORT, RunStatus.SUCCEEDED)
    assert run.experiment.name == "old-run" and run.experiment.project == "old-proj"
    points = MetricPoint.objects.filter(run=run).order_by("step")
    assert [(p.step, p.value) for p in points] == [(1, 0.5), (2, 0.25), (3, 0.5 / 3)]
    logs = list(LogLine.objects.filter(run=run).order_by("id").values_list("level", "text"))
    assert [level for level, _ in logs] == ["INFO", "WARNING"]
    assert logs[1][1].endswith("a warning\nwith a second line")
    assert RolloutSample.objects.filter(run=run).count() == 2
    checkpoint = Checkpoint.objects.get(run=run)
    assert (checkpoint.step, checkpoint.path) == (2, str(ckpt))
    assert run.started_at.timestamp() == pytest.approx(1_760_000_000.0)
    seqs = list(
        RunEvent.objects.filter(run_key=run.key).order_by("seq").values_list("seq", flat=True)
    )
    assert seqs == list(range(1, len(seqs) + 1))
    audit = AuditEvent.objects.get(action="run.import", target_id=str(run.pk))
    assert audit.after["checkpoints"] == 1 and audit.after["skipped_lines"] == 0
    # convertible like any other: the convert action accepts it (the worker does the rest)
    answer = alice_api.post(f"/api/v1/checkpoints/{checkpoint.pk}/convert/")
    assert answer.status_code in (200, 202), answer.content


def test_a_staged_job_dir_keeps_its_stages_and_a_run_without_an_end_is_lost(area, alice_api):
    job_dir = area / "proj" / "staged"
    write_job_dir(job_dir, stage="sft_warmup", end=None)
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir)})
    assert answer.status_code == 201, answer.content
    run = Run.objects.get(pk=answer.json()["id"])
    assert run.status == RunStatus.LOST and "does not record" in run.exit_reason
    assert set(MetricPoint.objects.filter(run=run).values_list("stage", flat=True)) == {
        "sft_warmup"
    }
    assert Checkpoint.objects.get(run=run).stage == "sft_warmup"


def test_a_half_written_last_line_is_skipped_and_named(area, alice_api):
    job_dir = area / "proj" / "killed"
    write_job_dir(job_dir)
    with (job_dir / "monitor" / "trainer_metrics.jsonl").open("a") as handle:
        handle.write('{"step": 4, "time": 1760000005.0, "actor/pg')
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir)})
    assert answer.status_code == 201, answer.content
    skipped = answer.json()["skipped_lines"]
    assert len(skipped) == 1 and "trainer_metrics.jsonl:4: not JSON" in skipped[0]
    assert MetricPoint.objects.filter(run_id=answer.json()["id"]).count() == 3


def test_an_import_goes_under_a_chosen_experiment_and_uses_a_given_config(area, alice, alice_api):
    job_dir = area / "proj" / "chosen"
    write_job_dir(job_dir, config=False)
    experiment = make_experiment(alice, "my-experiment")
    answer = post(alice_api, "/api/v1/runs/import/", {
        "job_dir": str(job_dir), "experiment": experiment.pk,
        "config_yaml": CONFIG.replace("name: from-terminal", "name: chosen"),
    })  # fmt: skip
    assert answer.status_code == 201, answer.content
    run = Run.objects.get(pk=answer.json()["id"])
    assert run.experiment == experiment and run.config["name"] == "chosen"
    bob_api = token_client(make_user("bob"))[0]
    answer = post(bob_api, "/api/v1/runs/import/", {"job_dir": str(job_dir),
                                                    "experiment": experiment.pk})  # fmt: skip
    assert answer.status_code == 404  # another user's experiment is answered as a missing one


def test_a_job_dir_without_a_config_needs_an_experiment_or_a_config(area, alice, alice_api):
    job_dir = area / "proj" / "noconfig"
    write_job_dir(job_dir, config=False)
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir)})
    assert answer.status_code == 400 and "holds no config.yaml" in answer.json()["detail"]
    assert Run.objects.count() == 0
    experiment = make_experiment(alice, "mine")
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir),
                                                      "experiment": experiment.pk})  # fmt: skip
    assert answer.status_code == 201, answer.content
    run = Run.objects.get(pk=answer.json()["id"])
    assert run.config == {"project": "proj", "name": "noconfig"}
    assert MetricPoint.objects.filter(run=run).count() == 3


@pytest.mark.parametrize(
    ("job_dir", "words"),
    [
        ("{area}/missing", "not a directory"),
        ("{area}/empty", "not a job dir"),
        ("", "blank"),
    ],
)
def test_a_bad_job_dir_is_a_400_and_imports_nothing(area, alice_api, job_dir, words):
    (area / "empty" / "sub").mkdir(parents=True)
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": job_dir.format(area=area)})
    assert answer.status_code == 400, answer.content
    assert words in json.dumps(answer.json()) and "job_dir" in json.dumps(answer.json())
    assert Run.objects.count() == 0 and Experiment.objects.count() == 0
    assert RunEvent.objects.count() == 0


def test_a_bad_config_in_the_job_dir_names_the_file(area, alice_api):
    job_dir = area / "proj" / "badconfig"
    write_job_dir(job_dir)
    (job_dir / "config.yaml").write_text("mode: sideways\n")
    answer = post(alice_api, "/api/v1/runs/import/", {"job_dir": str(job_dir)})
    assert answer.status_code == 400
    assert "config.yaml" in answer.json()["detail"] and "sideways" in answer.json()["detail"]
    assert Run.objects.count() == 0
