"""The JSON API's write side, through the apps' actions: create (from YAML or from a mapping),
update (a new config version), launch (on a real Ray head's job server), cancel and convert;
the refusals come back as 4xx with the YAML path of each error, and write nothing."""

from __future__ import annotations

import pytest
from api_helpers import make_checkpoint, make_experiment, make_run, make_user, token_client
from demo_rows import DEMO_YAML

from webapp.audit.models import AuditEvent
from webapp.checkpoints.models import HFStatus
from webapp.experiments.config_policy import parse_yaml
from webapp.experiments.models import Experiment, ExperimentVersion
from webapp.runs.models import Run, RunStatus
from workers.services import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(alice):
    return token_client(alice)[0]


def post(api, url: str, body=None):
    return api.post(url, body or {}, content_type="application/json")


def audit(action: str) -> list[AuditEvent]:
    return list(AuditEvent.objects.filter(action=action).order_by("id"))


def test_it_creates_an_experiment_from_yaml(api, roots):
    response = post(
        api, "/api/v1/experiments/", {"name": "demo", "config_yaml": DEMO_YAML, "tags": ["cpu"]}
    )
    assert response.status_code == 201, response.content
    body = response.json()
    experiment = Experiment.objects.get(pk=body["id"])
    assert body["name"] == "demo" and body["version"] == 1 and body["tags"] == ["cpu"]
    assert body["config_yaml"] == experiment.config_yaml
    assert parse_yaml(body["config_yaml"]) == parse_yaml(DEMO_YAML)
    assert body["config"]["model"]["model_path"] == "${oc.env:RFT_DEMO_DIR,./var/demo}/model"
    assert ExperimentVersion.objects.filter(experiment=experiment).count() == 1
    (row,) = audit("experiment.create")
    assert (row.actor_name, row.target_type, row.target_id) == (
        "alice",
        "experiment",
        str(experiment.pk),
    )


def test_it_creates_the_same_experiment_from_a_mapping(api, roots):
    from_yaml = post(api, "/api/v1/experiments/", {"name": "a", "config_yaml": DEMO_YAML}).json()
    from_map = post(api, "/api/v1/experiments/", {"name": "b", "config": parse_yaml(DEMO_YAML)})
    assert from_map.status_code == 201, from_map.content
    assert from_map.json()["config_yaml"] == from_yaml["config_yaml"]


@pytest.mark.parametrize(
    "change, path",
    [
        (("model", "model_path", "/etc"), "model.model_path"),
        (("model", "model_path", "${oc.env:SECRET_KEY}"), "model.model_path"),
        (("buffer", "batch_size", "eight"), "buffer.batch_size"),
    ],
)
def test_it_refuses_a_bad_config_naming_its_yaml_path_and_writes_nothing(api, roots, change, path):
    config = parse_yaml(DEMO_YAML)
    section, key, value = change
    config[section][key] = value
    response = post(api, "/api/v1/experiments/", {"name": "bad", "config": config})
    assert response.status_code == 400, response.content
    assert path in response.json()["errors"], response.json()
    assert not Experiment.objects.exists() and not audit("experiment.create")


def test_it_refuses_invalid_yaml_with_a_400(api, roots):
    response = post(api, "/api/v1/experiments/", {"name": "x", "config_yaml": "mode: [both"})
    assert response.status_code == 400
    assert response.json()["detail"]
    assert not Experiment.objects.exists()


@pytest.mark.parametrize(
    "body, field",
    [
        ({"name": "x", "config_yaml": DEMO_YAML, "config": {}}, "config"),
        ({"name": "x"}, "config_yaml"),
        ({"config_yaml": DEMO_YAML}, "name"),
        ({"name": "x", "config": [1, 2]}, "config"),
        ({"name": "x", "config_yaml": DEMO_YAML, "tags": "not-a-list"}, "tags"),
    ],
)
def test_it_rejects_a_malformed_create_body_naming_the_field(api, roots, body, field):
    response = post(api, "/api/v1/experiments/", body)
    assert response.status_code == 400
    assert field in response.json()["errors"], response.json()
    assert not Experiment.objects.exists()


def test_it_refuses_a_second_experiment_of_the_same_name(api, roots):
    assert (
        post(api, "/api/v1/experiments/", {"name": "twice", "config_yaml": DEMO_YAML}).status_code
        == 201
    )
    again = post(api, "/api/v1/experiments/", {"name": "twice", "config_yaml": DEMO_YAML})
    assert 400 <= again.status_code < 500
    assert [k for k in again.json()["errors"] if k.endswith("name")], again.json()
    assert Experiment.objects.count() == 1


def test_it_updates_the_config_as_a_new_version(api, roots):
    created = post(api, "/api/v1/experiments/", {"name": "v", "config_yaml": DEMO_YAML}).json()
    config = created["config"]
    config["buffer"]["total_steps"] = 3
    response = api.patch(
        f"/api/v1/experiments/{created['id']}/",
        {"config": config, "note": "shorter", "description": "three steps"},
        content_type="application/json",
    )
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["version"] == 2 and body["description"] == "three steps"
    assert body["config"]["buffer"]["total_steps"] == 3
    version = ExperimentVersion.objects.get(experiment_id=created["id"], number=2)
    assert version.note == "shorter" and "total_steps: 3" in version.config_yaml
    assert [r.target_id for r in audit("experiment.update")] == [str(created["id"])]


def test_it_refuses_a_bad_update_and_keeps_the_version(api, roots):
    created = post(api, "/api/v1/experiments/", {"name": "v", "config_yaml": DEMO_YAML}).json()
    response = api.patch(
        f"/api/v1/experiments/{created['id']}/",
        {"config_yaml": DEMO_YAML.replace("batch_size: 8", "batch_size: -3")},
        content_type="application/json",
    )
    assert response.status_code == 400 and "buffer.batch_size" in response.json()["errors"]
    assert Experiment.objects.get(pk=created["id"]).version == 1
    assert not audit("experiment.update")


def test_it_refuses_to_update_another_users_experiment(api, roots):
    other = make_experiment(make_user("bob"), "bobs")
    response = api.patch(
        f"/api/v1/experiments/{other.pk}/", {"name": "mine"}, content_type="application/json"
    )
    assert response.status_code == 404
    other.refresh_from_db()
    assert other.name == "bobs" and len(audit("permission.denied")) == 1


def test_it_launches_a_run_and_enqueues_it_after_commit(
    api, alice, roots, settings, ray_head, django_capture_on_commit_callbacks
):
    settings.RAY_ADDRESS = ray_head.address
    created = post(api, "/api/v1/experiments/", {"name": "go", "config_yaml": DEMO_YAML}).json()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = post(api, f"/api/v1/experiments/{created['id']}/launch/")
    assert response.status_code == 201, response.content
    body = response.json()
    run = Run.objects.get(pk=body["id"])
    assert body["status"] == "queued" and body["number"] == 1 and body["is_final"] is False
    assert body["config_yaml"] == created["config_yaml"] and run.launched_by == alice
    assert [cb for cb in callbacks if cb.__qualname__.startswith("queue_run.")]  # on commit
    (row,) = audit("run.launch")
    assert (row.actor_name, row.target_id) == ("alice", str(run.pk))
    listed = api.get(f"/api/v1/runs/?experiment={created['id']}").json()["results"]
    assert [r["id"] for r in listed] == [run.pk]
    assert api.get(f"/api/v1/experiments/{created['id']}/").json()["last_run"]["id"] == run.pk


def test_it_refuses_a_launch_while_ray_is_down_with_409_and_no_run(api, roots, settings):
    settings.RAY_ADDRESS = f"http://127.0.0.1:{free_port()}"
    created = post(api, "/api/v1/experiments/", {"name": "down", "config_yaml": DEMO_YAML}).json()
    response = post(api, f"/api/v1/experiments/{created['id']}/launch/")
    assert response.status_code == 409
    assert settings.RAY_ADDRESS in response.json()["detail"]
    assert not Run.objects.exists() and not audit("run.launch")


def test_it_cancels_a_queued_run_and_refuses_a_final_one(api, alice):
    experiment = make_experiment(alice, "c")
    queued = make_run(experiment, number=1, status=RunStatus.QUEUED)
    response = post(api, f"/api/v1/runs/{queued.pk}/cancel/")
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "cancelled" and response.json()["is_final"] is True
    again = post(api, f"/api/v1/runs/{queued.pk}/cancel/")
    assert again.status_code == 409 and "already" in again.json()["detail"]
    assert len(audit("run.cancel")) == 1


def test_it_queues_a_checkpoint_conversion_and_refuses_a_missing_step_dir(api, alice, tmp_path):
    run = make_run(make_experiment(alice, "ck"))
    step = tmp_path / "global_step_2"
    (step / "actor").mkdir(parents=True)
    present = make_checkpoint(run, step=2)
    present.path = str(step)
    present.save()
    response = post(api, f"/api/v1/checkpoints/{present.pk}/convert/")
    assert response.status_code == 202, response.content
    assert response.json()["hf_status"] == HFStatus.CONVERTING
    gone = make_checkpoint(run, step=4)  # its path does not exist
    refused = post(api, f"/api/v1/checkpoints/{gone.pk}/convert/")
    assert refused.status_code == 409 and refused.json()["detail"]
    assert [r.target_id for r in audit("checkpoint.convert")] == [str(present.pk)]
