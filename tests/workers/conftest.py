"""Fixtures of the workers' tests: a run row whose key names its event stream."""

from __future__ import annotations

import pytest


@pytest.fixture
def run(unique_id, tmp_path):
    """Run #1 of alice's experiment, starting, keyed ``unique_id``, its job dir ``tmp_path``."""
    from django.contrib.auth import get_user_model

    from webapp.experiments.models import Experiment
    from webapp.runs.models import Run, RunStatus

    owner = get_user_model().objects.create_user("alice", password=None)
    experiment = Experiment.objects.create(owner=owner, name="e", config_yaml="", config={})
    return Run.objects.create(
        experiment=experiment,
        number=1,
        key=unique_id,
        status=RunStatus.STARTING,
        config_yaml="",
        job_dir=str(tmp_path),
    )
