"""The experiment list's default sort, "updated", is the last activity (issue 31): a launch moves
an experiment up although it changes no field of the experiment itself, and the Updated column
shows the launch's time."""

from __future__ import annotations

from datetime import timedelta

import pytest
from demo_rows import make_experiment

from webapp.experiments.models import Experiment
from webapp.runs.models import Run

pytestmark = pytest.mark.django_db


def test_a_launch_moves_its_experiment_first_in_sort_updated(
    client, alice, roots, settings, ray_head
):
    settings.RAY_ADDRESS = ray_head.address
    older = make_experiment(alice, name="older")
    newer = make_experiment(alice, name="newer")
    # edited an hour apart: "newer" is the last edited one
    hour_ago = newer.updated - timedelta(hours=1)
    Experiment.objects.filter(pk=older.pk).update(updated=hour_ago)
    client.force_login(alice)
    page = client.get("/experiments/?sort=updated").content.decode()
    assert page.index(">newer<") < page.index(">older<")

    assert client.post(f"/runs/launch/{older.pk}/").status_code == 302
    run = Run.objects.get(experiment=older)
    # the launch saved the run, not the experiment: its own updated stays an hour ago
    older.refresh_from_db()
    assert older.updated == hour_ago and older.last_run_id == run.pk
    Run.objects.filter(pk=run.pk).update(status="succeeded")  # not "in progress first" that sorts
    page = client.get("/experiments/?sort=updated").content.decode()
    assert page.index(">older<") < page.index(">newer<")
    launched = run.created.strftime("%Y-%m-%d %H:%M")
    row = page[page.index(">older<") : page.index(">newer<")]
    assert f'<td data-field="last-activity">{launched}</td>' in row
