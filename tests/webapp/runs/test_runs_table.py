"""``/runs/``: the table of a user's runs across experiments (staff: everyone's), its filters,
search, sort and pages; a run's tags and notes set by its owner (audited, refused values name
the field, another user gets a 404); tags in the API (``tags`` on a run, ``?tag=``)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from api_helpers import make_experiment, make_run, make_user, session_client, token_client
from django.db import connection
from django.test.utils import CaptureQueriesContext

from webapp.audit.models import AuditEvent
from webapp.audit.record import Actor
from webapp.events.models import RunEvent
from webapp.experiments.models import Tag
from webapp.runs.annotations import set_run_tags
from webapp.runs.models import Run, RunStatus
from webapp.runs.table import PAGE_SIZE
from webapp.runs.telemetry import record_metrics

pytestmark = pytest.mark.django_db


@pytest.fixture
def runs(alice, bob):
    """alice: two experiments, three runs (one tagged ``baseline``, one with notes); bob: one."""
    math = make_experiment(alice, "alice-math", project="gsm")
    code = make_experiment(alice, "alice-code", project="mbpp")
    first = make_run(math, number=1, status=RunStatus.SUCCEEDED, last_eval_accuracy=0.5)
    second = make_run(math, number=2, status=RunStatus.FAILED, last_eval_accuracy=0.9)
    third = make_run(code, number=1, status=RunStatus.RUNNING, notes="lr sweep, try 3e-6 next")
    first.tags.add(Tag.objects.create(name="baseline"))
    theirs = make_run(make_experiment(bob, "bob-secret"), number=1, status=RunStatus.SUCCEEDED)
    theirs.tags.add(Tag.objects.get(name="baseline"))
    return {"first": first, "second": second, "third": third, "theirs": theirs}


def _metric_event(payload: dict, step: int) -> RunEvent:
    at = datetime.fromtimestamp(1_733_150_000 + step, tz=UTC)
    return RunEvent(run_key="k", stream_id=f"{step}-0", kind="metric", role="explorer",
                    stage="", step=step, payload=payload, emitted_at=at)  # fmt: skip


def _ids(response) -> list[int]:
    assert response.status_code == 200, response.content[:500]
    return [int(pk) for pk in re.findall(r'data-run-id="(\d+)"', response.content.decode())]


def test_it_lists_only_the_users_own_runs_across_experiments(alice, runs):
    response = session_client(alice).get("/runs/")
    assert _ids(response) == [runs["third"].pk, runs["second"].pk, runs["first"].pk]
    assert "bob-secret" not in response.content.decode()


def test_staff_see_everyones_runs_with_their_owner(runs):
    response = session_client(make_user("root", staff=True)).get("/runs/")
    assert sorted(_ids(response)) == sorted(r.pk for r in runs.values())
    assert "<td>bob</td>" in response.content.decode()


def test_it_filters_by_status_tag_and_experiment(alice, runs):
    client = session_client(alice)
    assert _ids(client.get("/runs/?status=failed")) == [runs["second"].pk]
    assert _ids(client.get("/runs/?tag=baseline")) == [runs["first"].pk]  # not bob's
    math = runs["first"].experiment_id
    assert _ids(client.get(f"/runs/?experiment={math}")) == [runs["second"].pk, runs["first"].pk]
    assert _ids(client.get(f"/runs/?experiment={runs['theirs'].experiment_id}")) == []


def test_it_searches_experiment_project_notes_tags_and_number(alice, runs):
    client = session_client(alice)
    assert _ids(client.get("/runs/?q=sweep")) == [runs["third"].pk]
    assert _ids(client.get("/runs/?q=mbpp")) == [runs["third"].pk]
    assert _ids(client.get("/runs/?q=basel")) == [runs["first"].pk]
    assert _ids(client.get("/runs/?q=%232")) == [runs["second"].pk]
    assert _ids(client.get("/runs/?q=bob")) == []


def test_it_sorts_by_eval_accuracy_with_unknown_last(alice, runs):
    client = session_client(alice)
    expected = [runs["second"].pk, runs["first"].pk, runs["third"].pk]
    assert _ids(client.get("/runs/?sort=-eval")) == expected
    assert _ids(client.get("/runs/?sort=eval")) == [runs["first"].pk, runs["second"].pk, runs["third"].pk]  # fmt: skip


def test_it_shows_the_latest_reward_and_sorts_by_it(alice, runs):
    for run, values in ((runs["first"], (0.1, 0.7)), (runs["second"], (0.2, 0.3))):
        for step, value in enumerate(values, start=1):  # as the ingestor writes them
            record_metrics(run, [_metric_event({"rollout/reward/mean": value}, step)])
    client = session_client(alice)
    body = client.get("/runs/?sort=-reward").content.decode()
    assert _ids(client.get("/runs/?sort=-reward")) == [
        runs["first"].pk, runs["second"].pk, runs["third"].pk
    ]  # fmt: skip
    assert '<td data-field="reward">0.700</td>' in body
    assert '<td data-field="reward">0.300</td>' in body


def test_a_run_in_its_sft_stage_shows_the_sft_loss_then_its_reward_in_the_next_stage(alice, runs):
    run = runs["third"]
    for step, loss in ((1, 2.0), (2, 0.412)):  # the SFT stage: no reward, its loss is the figure
        record_metrics(run, [_metric_event({"actor/sft_loss": loss, "time/train_step": 3.0}, step)])
    row = _row(session_client(alice).get("/runs/").content.decode(), run.pk)
    assert '<td data-field="reward"><span class="hint">SFT loss</span> 0.412</td>' in row
    run.refresh_from_db()
    assert run.headline == {"name": "actor/sft_loss", "label": "SFT loss", "value": 0.412}
    assert session_client(alice).get(f"/runs/{run.pk}/").content.decode().count("SFT loss") == 1
    # the GRPO stage: its reward is the figure again
    record_metrics(run, [_metric_event({"rollout/reward/mean": 0.25}, 1)])
    row = _row(session_client(alice).get("/runs/").content.decode(), run.pk)
    assert '<td data-field="reward">0.250</td>' in row
    run.refresh_from_db()
    assert run.headline == {"name": "reward", "label": "Reward", "value": 0.25}


def _row(body: str, pk: int) -> str:
    """The ``<tr>`` of run ``pk`` in the table."""
    match = re.search(rf'<tr data-run-id="{pk}".*?</tr>', body, re.S)
    assert match, f"no row of run {pk}"
    return match.group(0)


def test_it_pages_on_the_server_with_the_same_queries_per_page(alice):
    experiment = make_experiment(alice, "many")
    Run.objects.bulk_create(
        Run(experiment=experiment, number=n, config_yaml="", config={}, status="succeeded")
        for n in range(1, PAGE_SIZE * 2 + 21)
    )
    client = session_client(alice)
    first = _ids(client.get("/runs/"))
    last = _ids(client.get("/runs/?page=3"))
    assert len(first) == PAGE_SIZE and len(last) == 20
    assert "(120 runs)" in client.get("/runs/").content.decode()
    with CaptureQueriesContext(connection) as full:
        client.get("/runs/")
    with CaptureQueriesContext(connection) as short:
        client.get("/runs/?page=3")
    assert len(full) == len(short)


@pytest.mark.parametrize(
    ("query", "named"),
    [("status=done", "?status="), ("experiment=abc", "?experiment="), ("sort=colour", "?sort=")],
)
def test_a_filter_it_does_not_know_is_a_400_naming_the_parameter(alice, runs, query, named):
    response = session_client(alice).get(f"/runs/?{query}")
    assert response.status_code == 400
    assert named in response.content.decode()


# ---------------------------------------------------------------- tags and notes


def test_the_owner_sets_tags_and_notes_and_each_change_is_audited(alice, runs):
    run = runs["first"]
    client = session_client(alice, csrf=False)
    response = client.post(f"/runs/{run.pk}/tags/", {"tags": " sweep-lr , baseline, sweep-lr"})
    assert response.status_code == 302 and response["Location"] == f"/runs/{run.pk}/"
    assert sorted(t.name for t in run.tags.all()) == ["baseline", "sweep-lr"]
    tagged = AuditEvent.objects.get(action="run.tags")
    assert tagged.actor_id == alice.pk and tagged.target_id == str(run.pk)
    assert tagged.before == {"tags": ["baseline"]}
    assert tagged.after == {"tags": ["baseline", "sweep-lr"]}

    response = client.post(
        f"/runs/{run.pk}/notes/", {"notes": "best so far"}, HTTP_ACCEPT="application/json"
    )
    assert response.json() == {"id": run.pk, "tags": ["baseline", "sweep-lr"], "notes": "best so far"}  # fmt: skip
    noted = AuditEvent.objects.get(action="run.notes")
    assert (noted.before, noted.after) == ({"notes": ""}, {"notes": "best so far"})
    assert Run.objects.get(pk=run.pk).notes == "best so far"


def test_staff_may_tag_another_users_run(runs):
    root = make_user("root", staff=True)
    response = session_client(root, csrf=False).post(
        f"/runs/{runs['theirs'].pk}/tags/", {"tags": "reviewed"}
    )
    assert response.status_code == 302
    assert [t.name for t in runs["theirs"].tags.all()] == ["reviewed"]


def test_another_user_gets_a_404_and_nothing_changes(bob, runs):
    run = runs["first"]
    client = session_client(bob, csrf=False)
    assert client.post(f"/runs/{run.pk}/tags/", {"tags": "mine"}).status_code == 404
    assert client.post(f"/runs/{run.pk}/notes/", {"notes": "mine"}).status_code == 404
    assert [t.name for t in run.tags.all()] == ["baseline"]
    assert Run.objects.get(pk=run.pk).notes == ""
    denied = AuditEvent.objects.filter(action="permission.denied", actor_id=bob.pk)
    assert denied.count() == 2
    assert not AuditEvent.objects.filter(action__in=["run.tags", "run.notes"]).exists()


def test_a_bad_tag_or_note_is_a_400_naming_the_field_and_nothing_is_written(alice, runs):
    run = runs["first"]
    client = session_client(alice, csrf=False)
    response = client.post(
        f"/runs/{run.pk}/tags/", {"tags": "x" * 65}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 400 and "tags" in response.json()["errors"]
    too_many = ",".join(f"t{i}" for i in range(21))
    response = client.post(f"/runs/{run.pk}/tags/", {"tags": too_many})
    assert response.status_code == 400 and "at most 20 tags" in response.content.decode()
    response = client.post(
        f"/runs/{run.pk}/notes/", {"notes": "a\x00b"}, HTTP_ACCEPT="application/json"
    )
    assert response.status_code == 400 and "notes" in response.json()["errors"]
    assert [t.name for t in run.tags.all()] == ["baseline"]
    assert Run.objects.get(pk=run.pk).notes == ""
    assert not AuditEvent.objects.filter(action__in=["run.tags", "run.notes"]).exists()


def test_the_run_page_shows_the_tags_notes_and_download_links(alice, runs):
    run = runs["third"]
    set_run_tags(Actor(user=alice), run, ["sweep"])
    body = session_client(alice).get(f"/runs/{run.pk}/").content.decode()
    assert 'href="/runs/?tag=sweep"' in body
    assert "lr sweep, try 3e-6 next</textarea>" in body
    for link in ("metrics.csv", "metrics.json", "logs.txt"):
        assert f'href="/runs/{run.pk}/{link}"' in body


# ---------------------------------------------------------------- the API


def test_the_api_lists_a_runs_tags_and_filters_by_tag(alice, runs):
    client, _ = token_client(alice)
    body = client.get("/api/v1/runs/?tag=baseline").json()
    assert [r["id"] for r in body["results"]] == [runs["first"].pk]
    assert body["results"][0]["tags"] == ["baseline"]
    detail = client.get(f"/api/v1/runs/{runs['third'].pk}/").json()
    assert detail["tags"] == [] and detail["notes"] == "lr sweep, try 3e-6 next"
