"""The JSON API's read side: lists filtered and limited to what the user may see, single
objects through the access rule (another user's: the 404 of a missing one, with an audit row),
metric and log pages by sequence number, the error body, session auth with CSRF, the OpenAPI
schema."""

from __future__ import annotations

import json

import pytest
import yaml
from api_helpers import (
    make_checkpoint,
    make_experiment,
    make_run,
    make_user,
    session_client,
    token_client,
)
from django.test import Client

from webapp.audit.models import AuditEvent
from webapp.runs.models import LogLine, MetricPoint, RunStatus

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(alice):
    return token_client(alice)[0]


def names(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [row["name"] for row in response.json()["results"]]


def test_it_lists_only_the_users_own_experiments(alice, bob, api):
    make_experiment(alice, "alice-1")
    make_experiment(bob, "bob-secret")
    response = api.get("/api/v1/experiments/")
    assert names(response) == ["alice-1"]
    assert b"bob-secret" not in response.content
    assert response.json()["count"] == 1


def test_it_lists_every_experiment_for_staff(alice, bob):
    make_experiment(alice, "alice-1")
    make_experiment(bob, "bob-1")
    staff = token_client(make_user("root", staff=True))[0]
    assert sorted(names(staff.get("/api/v1/experiments/"))) == ["alice-1", "bob-1"]


def test_it_filters_experiments_by_project_tag_and_search(alice, api):
    make_experiment(alice, "gsm8k-grpo", project="math", tags=["grpo"])
    make_experiment(alice, "gsm8k-sft", project="math", tags=["sft"])
    make_experiment(alice, "countdown", project="games", tags=["grpo"], description="a puzzle")
    assert sorted(names(api.get("/api/v1/experiments/?project=math"))) == [
        "gsm8k-grpo",
        "gsm8k-sft",
    ]
    assert sorted(names(api.get("/api/v1/experiments/?tag=grpo"))) == ["countdown", "gsm8k-grpo"]
    assert names(api.get("/api/v1/experiments/?search=PUZZLE")) == ["countdown"]
    assert names(api.get("/api/v1/experiments/?project=math&tag=sft&search=gsm")) == ["gsm8k-sft"]


def test_it_paginates_with_limit_and_offset(alice, api):
    for i in range(5):
        make_experiment(alice, f"e{i}")
    page = api.get("/api/v1/experiments/?limit=2&offset=2").json()
    assert page["count"] == 5 and len(page["results"]) == 2
    assert page["next"].endswith("limit=2&offset=4")


def test_it_reads_an_experiment_with_config_version_and_last_run(alice, api):
    experiment = make_experiment(alice, "detail", tags=["a", "b"])
    run = make_run(experiment, status=RunStatus.FAILED)
    body = api.get(f"/api/v1/experiments/{experiment.pk}/").json()
    assert body["config_yaml"] == experiment.config_yaml
    assert body["config"] == {"project": "api-tests", "name": "minimal"}
    assert body["version"] == 1 and body["tags"] == ["a", "b"] and body["owner"] == "alice"
    assert body["last_run"]["id"] == run.pk and body["last_run"]["status"] == "failed"


def test_it_answers_another_users_experiment_as_a_missing_one_with_an_audit_row(bob, api):
    secret = make_experiment(bob, "bob-secret")
    response = api.get(f"/api/v1/experiments/{secret.pk}/")
    assert response.status_code == 404
    # word for word a missing experiment's answer: nothing says that it exists
    assert response.json() == {
        "detail": f"no experiment {secret.pk}",
        "errors": {},
        "error_list": [],
    }
    assert b"bob-secret" not in response.content
    denial = AuditEvent.objects.get(action="permission.denied")
    assert (denial.actor_name, denial.target_type, denial.target_id) == (
        "alice",
        "experiment",
        str(secret.pk),
    )
    assert denial.after == {"attempted": "experiment.view"}


def test_it_answers_404_for_a_missing_experiment_without_an_audit_row(api):
    response = api.get("/api/v1/experiments/999999/")
    assert response.status_code == 404
    assert response.json()["detail"] == "no experiment 999999"
    assert not AuditEvent.objects.exists()


def test_it_lists_runs_filtered_by_experiment_and_status(alice, bob, api):
    first, second = make_experiment(alice, "one"), make_experiment(alice, "two")
    make_run(first, number=1, status=RunStatus.SUCCEEDED)
    failed = make_run(first, number=2, status=RunStatus.FAILED)
    make_run(second, number=1, status=RunStatus.FAILED)
    make_run(make_experiment(bob, "bobs"), number=1, status=RunStatus.FAILED)
    all_runs = api.get("/api/v1/runs/").json()
    assert all_runs["count"] == 3 and b"bobs" not in json.dumps(all_runs).encode()
    only = api.get(f"/api/v1/runs/?experiment={first.pk}&status=failed").json()["results"]
    assert [r["id"] for r in only] == [failed.pk]
    assert only[0]["experiment_name"] == "one" and only[0]["is_final"] is True


@pytest.mark.parametrize(
    "query, field",
    [("status=bogus", "status"), ("experiment=abc", "experiment"), ("experiment=0", "experiment")],
)
def test_it_rejects_bad_run_filters_naming_the_parameter(api, query, field):
    response = api.get(f"/api/v1/runs/?{query}")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_it_reads_a_run_with_its_config_snapshot(alice, api):
    run = make_run(make_experiment(alice, "snap"), status=RunStatus.RUNNING)
    body = api.get(f"/api/v1/runs/{run.pk}/").json()
    assert body["status"] == "running" and body["is_final"] is False
    assert body["config_yaml"] == run.config_yaml and body["number"] == 1


def test_it_refuses_another_users_run_and_its_metrics_logs_checkpoints(bob, api):
    run = make_run(make_experiment(bob, "bobs"))
    for suffix in ("", "metrics/", "logs/", "checkpoints/"):
        assert api.get(f"/api/v1/runs/{run.pk}/{suffix}").status_code == 404
    assert AuditEvent.objects.filter(action="permission.denied").count() == 4


def _points(run, name: str, values: list[float]) -> list[MetricPoint]:
    return [
        MetricPoint.objects.create(run=run, name=name, step=i + 1, wall_time=100.0 + i, value=v)
        for i, v in enumerate(values)
    ]


def test_it_lists_metric_names_then_pages_points_by_sequence(alice, api):
    run = make_run(make_experiment(alice, "m"))
    reward = _points(run, "rollout/reward/mean", [0.1, 0.2, 0.3, 0.4, 0.5])
    _points(run, "actor/loss", [1.0])
    base = f"/api/v1/runs/{run.pk}/metrics/"
    assert api.get(base).json() == {"run": run.pk, "names": ["actor/loss", "rollout/reward/mean"]}
    first = api.get(f"{base}?name=rollout/reward/mean&limit=2").json()
    assert [p["value"] for p in first["points"]] == [0.1, 0.2]
    assert [p["seq"] for p in first["points"]] == [reward[0].pk, reward[1].pk]
    assert first["next_after"] == reward[1].pk
    rest = api.get(f"{base}?name=rollout/reward/mean&after={first['next_after']}").json()
    assert [p["step"] for p in rest["points"]] == [3, 4, 5]
    done = api.get(f"{base}?name=rollout/reward/mean&after={rest['next_after']}").json()
    assert done["points"] == [] and done["next_after"] == rest["next_after"]


@pytest.mark.parametrize(
    "query, field", [("limit=5001", "limit"), ("limit=0", "limit"), ("after=-1", "after")]
)
def test_it_rejects_metric_pages_out_of_range(alice, api, query, field):
    run = make_run(make_experiment(alice, "m"))
    response = api.get(f"/api/v1/runs/{run.pk}/metrics/?name=x&{query}")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_it_pages_logs_by_sequence_actor_and_level(alice, api):
    run = make_run(make_experiment(alice, "logs"))
    lines = [
        LogLine.objects.create(run=run, actor=a, level=lv, wall_time=1.0, text=t)
        for a, lv, t in [
            ("explorer", "INFO", "start"),
            ("trainer", "WARNING", "slow step"),
            ("explorer", "ERROR", "boom"),
        ]
    ]
    base = f"/api/v1/runs/{run.pk}/logs/"
    assert [x["text"] for x in api.get(base).json()["lines"]] == ["start", "slow step", "boom"]
    assert [x["text"] for x in api.get(f"{base}?actor=explorer").json()["lines"]] == [
        "start",
        "boom",
    ]
    assert [x["text"] for x in api.get(f"{base}?level=error").json()["lines"]] == ["boom"]
    page = api.get(f"{base}?after={lines[0].pk}&limit=1").json()
    assert [x["seq"] for x in page["lines"]] == [lines[1].pk] and page["next_after"] == lines[1].pk


def test_it_lists_a_runs_checkpoints_by_step(alice, api):
    run = make_run(make_experiment(alice, "ckpt"))
    make_checkpoint(run, step=4)
    make_checkpoint(run, step=2)
    body = api.get(f"/api/v1/runs/{run.pk}/checkpoints/").json()
    assert [(c["step"], c["hf_status"]) for c in body] == [(2, "absent"), (4, "absent")]


def test_it_answers_anonymous_calls_with_401_not_a_login_redirect():
    response = Client().get("/api/v1/experiments/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_it_refuses_a_session_post_without_the_csrf_token(alice):
    client = session_client(alice)
    response = client.post(
        "/api/v1/experiments/",
        {"name": "x", "config_yaml": "a: 1"},
        content_type="application/json",
    )
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_it_accepts_session_reads_without_csrf(alice):
    make_experiment(alice, "mine")
    assert names(session_client(alice).get("/api/v1/experiments/")) == ["mine"]


def test_it_rejects_a_body_that_is_not_a_json_object(api):
    for body in ("[1, 2]", '"text"', "{not json"):
        response = api.post("/api/v1/experiments/", body, content_type="application/json")
        assert response.status_code == 400, body
        assert response.json()["detail"]


def test_it_serves_the_openapi_schema_as_yaml_and_json(api):
    as_yaml = api.get("/api/v1/schema/")
    assert as_yaml.status_code == 200
    schema = yaml.safe_load(as_yaml.content)
    as_json = api.get("/api/v1/schema/?format=json")
    assert as_json.status_code == 200 and as_json.json() == schema
    paths = schema["paths"]
    for path in (
        "/api/v1/experiments/",
        "/api/v1/experiments/{id}/launch/",
        "/api/v1/runs/{id}/metrics/",
        "/api/v1/checkpoints/{id}/convert/",
    ):
        assert path in paths, sorted(paths)
    assert schema["components"]["securitySchemes"]["apiToken"]["scheme"] == "bearer"


def test_it_refuses_the_schema_to_anonymous_users():
    assert Client().get("/api/v1/schema/").status_code == 401


def test_the_openapi_schema_validates_without_warnings(tmp_path):
    """drf-spectacular's own check: every view, serializer and the token scheme resolve."""
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert "/api/v1/runs/{id}/logs/" in yaml.safe_load(out.read_text())["paths"]
