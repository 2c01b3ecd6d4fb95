"""The run page's download and file-list views: ``GET /runs/<id>/logs.txt`` (every LogLine in
order, ``?actor=`` / ``?level=`` filters) and ``GET /checkpoints/<id>/files.json`` (the
converted directory's files), both under the one access rule (404 missing, 403 + audit row
for another user's, the owner and staff allowed)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import Checkpoint, HFStatus
from webapp.experiments.models import Experiment
from webapp.runs.models import LogLine, Run

pytestmark = pytest.mark.django_db

LINES = [
    ("explorer", "INFO", "explorer step 1 rollouts done"),
    ("trainer", "WARNING", "trainer step 1 grad norm high"),
    ("trainer_rank1", "INFO", "rank 1 ready"),
    ("trainer", "INFO", "trainer step 2 done"),
]


@pytest.fixture
def run(alice, tmp_path):
    experiment = Experiment.objects.create(owner=alice, name="e", config_yaml="", config={})
    run = Run.objects.create(experiment=experiment, number=1, config_yaml="", job_dir=str(tmp_path))
    for i, (actor, level, text) in enumerate(LINES):
        LogLine.objects.create(
            run=run, actor=actor, level=level, stage="rft", wall_time=1.7e9 + i, text=text
        )
    return run


@pytest.fixture
def converted(run, tmp_path):
    hf = tmp_path / "global_step_2" / "actor" / "huggingface"
    (hf / "sub").mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    (hf / "model.safetensors").write_bytes(b"w" * 64)
    (hf / "sub" / "extra.txt").write_text("x")
    (hf / "outside").symlink_to(tmp_path)  # a link is neither followed nor listed
    return Checkpoint.objects.create(
        run=run,
        stage="rft",
        step=2,
        path=str(hf.parents[1]),
        hf_status=HFStatus.READY,
        hf_path=str(hf),
    )


def test_the_log_download_holds_every_line_in_order(client, alice, run):
    client.force_login(alice)
    response = client.get(f"/runs/{run.pk}/logs.txt")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    assert "attachment" in response["Content-Disposition"]
    lines = b"".join(response.streaming_content).decode().splitlines()
    assert [line.split(" ", 4)[4] for line in lines] == [text for *_, text in LINES]
    assert lines[1].split(" ")[1:4] == ["WARNING", "trainer", "[rft]"]


def test_the_log_download_filters_by_actor_and_level(client, alice, run):
    client.force_login(alice)

    def texts(query: str) -> list[str]:
        body = b"".join(client.get(f"/runs/{run.pk}/logs.txt?{query}").streaming_content)
        return [line.split(" ", 4)[4] for line in body.decode().splitlines()]

    assert texts("actor=trainer") == [LINES[1][2], LINES[3][2]]
    assert texts("actor=trainer,trainer_rank1") == [LINES[1][2], LINES[2][2], LINES[3][2]]
    assert texts("level=warning") == [LINES[1][2]]
    assert texts("actor=explorer&level=WARNING") == []


def test_it_answers_another_users_log_with_404_and_audits_it(client, bob, run):
    client.force_login(bob)
    assert client.get(f"/runs/{run.pk}/logs.txt").status_code == 404
    denied = AuditEvent.objects.get(action="permission.denied")
    assert denied.actor_id == bob.pk and denied.target_id == str(run.pk)


def test_it_answers_404_for_a_missing_runs_log_and_sends_the_anonymous_to_log_in(
    client, alice, run
):
    assert client.get(f"/runs/{run.pk}/logs.txt").status_code == 302  # to the login page
    client.force_login(alice)
    assert client.get(f"/runs/{run.pk + 99}/logs.txt").status_code == 404


def test_staff_may_download_any_runs_log(client, run):
    staff = get_user_model().objects.create_user("root", password=None, is_staff=True)
    client.force_login(staff)
    assert client.get(f"/runs/{run.pk}/logs.txt").status_code == 200


def test_the_file_list_names_the_converted_files_with_sizes(client, alice, converted):
    client.force_login(alice)
    response = client.get(f"/checkpoints/{converted.pk}/files.json")
    assert response.status_code == 200
    body = response.json()
    assert body["hf_path"] == converted.hf_path and body["truncated"] is False
    assert body["files"] == [
        {"path": "config.json", "size_bytes": 2},
        {"path": "model.safetensors", "size_bytes": 64},
        {"path": "sub/extra.txt", "size_bytes": 1},
    ]


def test_the_file_list_of_an_unconverted_checkpoint_is_a_409_saying_so(client, alice, run):
    checkpoint = Checkpoint.objects.create(run=run, stage="rft", step=3, path="/nowhere")
    client.force_login(alice)
    response = client.get(f"/checkpoints/{checkpoint.pk}/files.json")
    assert response.status_code == 409
    assert "rft/global_step_3 has no converted directory" in response.json()["error"]


def test_the_file_list_of_a_converted_dir_gone_from_disk_is_a_409(client, alice, converted):
    import shutil

    shutil.rmtree(converted.hf_path)
    client.force_login(alice)
    response = client.get(f"/checkpoints/{converted.pk}/files.json")
    assert response.status_code == 409 and "gone from disk" in response.json()["error"]


def test_it_refuses_another_users_file_list_with_403_and_404_for_a_missing_one(
    client, bob, converted
):
    client.force_login(bob)
    assert client.get(f"/checkpoints/{converted.pk}/files.json").status_code == 403
    assert AuditEvent.objects.filter(action="permission.denied", actor_id=bob.pk).count() == 1
    assert client.get(f"/checkpoints/{converted.pk + 99}/files.json").status_code == 404
