"""``/runs/compare/data.json``: the metric series the compare page overlays. Every id goes
through the access rule (404 unknown, 403 + audit row for another user's run), bad ids and
names are a 400 naming the parameter, and the answer is bounded (runs, names, points)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from webapp.audit.models import AuditEvent
from webapp.experiments.models import Experiment
from webapp.runs import compare
from webapp.runs.models import MetricPoint, Run

pytestmark = pytest.mark.django_db

ACC = "eval/gsm8k/accuracy/mean@1"
REWARD = "rollout/reward/mean"
LOSS = "actor/pg_loss"


def _user(name: str, *, staff: bool = False):
    return get_user_model().objects.create_user(name, password=None, is_staff=staff)


def _run(owner, number: int = 1, name: str = "demo") -> Run:
    experiment, _ = Experiment.objects.get_or_create(
        owner=owner, name=name, defaults={"config_yaml": "", "config": {}}
    )
    return Run.objects.create(experiment=experiment, number=number, config_yaml="")


def _points(run: Run, name: str, values: list[float | None], stage: str = "rft") -> None:
    MetricPoint.objects.bulk_create(
        MetricPoint(
            run=run, name=name, role="explorer", stage=stage, step=i + 1, wall_time=1000.0 + i,
            value=v,
        )
        for i, v in enumerate(values)
    )  # fmt: skip


@pytest.fixture
def alice():
    return _user("alice")


@pytest.fixture
def two_runs(alice):
    one, two = _run(alice, 1), _run(alice, 2)
    for run, scale in ((one, 1.0), (two, 2.0)):
        _points(run, REWARD, [0.1 * scale, 0.2 * scale, None])
        _points(run, ACC, [0.5 * scale])
        _points(run, LOSS, [3.0, 2.0])
    return one, two


def _get(client, query: str):
    return client.get(f"/runs/compare/data.json?{query}")


def test_it_answers_each_runs_series_of_the_reward_and_accuracy_group_by_default(
    client, alice, two_runs
):
    one, two = two_runs
    client.force_login(alice)
    response = _get(client, f"ids={two.pk},{one.pk}")
    assert response.status_code == 200
    body = response.json()
    assert body["names"] == [LOSS, ACC, REWARD]  # every metric any run has, for the picker
    assert body["selected"] == [ACC, REWARD]
    assert [r["id"] for r in body["runs"]] == [two.pk, one.pk]  # the order asked for
    assert [r["label"] for r in body["runs"]] == ["demo #2", "demo #1"]
    reward = body["runs"][1]["metrics"][REWARD]
    assert reward["step"] == [1, 2, 3]
    assert reward["wall_time"] == [1000.0, 1001.0, 1002.0]
    assert reward["value"] == [0.1, 0.2, None]  # NaN stored as null stays null
    assert reward["stage"] == ["rft"] * 3 and reward["downsampled"] is False
    assert body["runs"][0]["metrics"][ACC]["value"] == [1.0]
    assert LOSS not in body["runs"][0]["metrics"]


def test_it_answers_only_the_metrics_named(client, alice, two_runs):
    one, two = two_runs
    client.force_login(alice)
    body = _get(client, f"ids={one.pk},{two.pk}&names={LOSS},no/such/metric").json()
    assert body["selected"] == [LOSS, "no/such/metric"]
    for run in body["runs"]:
        assert list(run["metrics"]) == [LOSS]
        assert run["metrics"][LOSS]["value"] == [3.0, 2.0]


def test_it_refuses_bad_ids_with_400_naming_the_parameter(client, alice, two_runs):
    one, _ = two_runs
    client.force_login(alice)
    for query in ("", "ids=", f"ids={one.pk}", f"ids={one.pk},x", f"ids={one.pk},-2", "ids=1;2"):
        response = _get(client, query)
        assert response.status_code == 400, query
        assert response.json()["detail"].startswith("ids:"), query
        assert "ids" in response.json()["errors"], query


def test_it_refuses_more_than_the_maximum_of_runs_and_names(client, alice):
    runs = [_run(alice, n) for n in range(1, compare.MAX_RUNS + 2)]
    client.force_login(alice)
    ids = ",".join(str(r.pk) for r in runs)
    response = _get(client, f"ids={ids}")
    assert response.status_code == 400
    assert f"2 to {compare.MAX_RUNS}" in response.json()["detail"]
    ok = ",".join(str(r.pk) for r in runs[: compare.MAX_RUNS])
    assert _get(client, f"ids={ok}").status_code == 200
    names = ",".join(f"m{i}" for i in range(compare.MAX_NAMES + 1))
    response = _get(client, f"ids={ok}&names={names}")
    assert response.status_code == 400 and response.json()["detail"].startswith("names:")
    response = _get(client, f"ids={ok}&names={'x' * (compare.MAX_NAME_CHARS + 1)}")
    assert response.status_code == 400 and "names" in response.json()["errors"]


def test_it_thins_a_long_series_to_the_maximum_keeping_first_and_last(
    client, alice, settings, monkeypatch
):
    monkeypatch.setattr(compare, "MAX_POINTS", 10)
    one, two = _run(alice, 1), _run(alice, 2)
    _points(one, REWARD, [float(i) for i in range(95)])
    _points(two, REWARD, [1.0, 2.0])
    client.force_login(alice)
    runs = _get(client, f"ids={one.pk},{two.pk}").json()["runs"]
    thinned = runs[0]["metrics"][REWARD]
    assert len(thinned["value"]) == 10 and thinned["downsampled"] is True
    assert thinned["value"][0] == 0.0 and thinned["value"][-1] == 94.0
    assert thinned["step"] == [int(v) + 1 for v in thinned["value"]]  # arrays stay aligned
    assert runs[1]["metrics"][REWARD]["downsampled"] is False


def test_another_users_run_is_403_with_an_audit_row_and_a_missing_one_404(client, alice, two_runs):
    one, _ = two_runs
    bob = _user("bob")
    theirs = _run(bob, 1, name="bobs")
    client.force_login(alice)
    response = _get(client, f"ids={one.pk},{theirs.pk}")
    assert response.status_code == 403
    assert REWARD not in response.content.decode()
    denied = AuditEvent.objects.get(action="permission.denied")
    assert (denied.actor_name, denied.target_type, denied.target_id) == (
        "alice", "run", str(theirs.pk)
    )  # fmt: skip
    assert _get(client, f"ids={one.pk},999999").status_code == 404


def test_anonymous_is_sent_to_log_in_and_staff_sees_any_run(client, alice, two_runs):
    one, two = two_runs
    response = _get(client, f"ids={one.pk},{two.pk}")
    assert response.status_code in (302, 403) and REWARD not in response.content.decode()
    client.force_login(_user("root", staff=True))
    body = _get(client, f"ids={one.pk},{two.pk}").json()
    assert [r["id"] for r in body["runs"]] == [one.pk, two.pk]
