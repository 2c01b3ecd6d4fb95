"""Fixtures shared by the web tests. tests/webapp is laid out like webapp (``accounts/``, ``api/``,
``audit/``, ``checkpoints/``, ``experiments/``, ``health/``, ``runs/``); the tests of the whole
site (the authorization and CSRF matrices, the icon) stay here, with the helper modules the folders
share (``api_helpers``, ``browser_session``, ``fuzz_strategies``, ``job_dirs``, ``route_matrix``):
this folder is put on ``sys.path`` here, so ``from api_helpers import make_user`` works from any
subfolder."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from api_helpers import make_user
from demo_rows import finished_demo_run, full_checkpoint
from django.contrib.auth import get_user_model

from webapp.checkpoints.models import Checkpoint

WEB_TESTS = str(Path(__file__).resolve().parent)
if WEB_TESTS not in sys.path:
    sys.path.insert(0, WEB_TESTS)


@pytest.fixture
def roots(tmp_path, settings, monkeypatch):
    """The demo config's paths resolve inside this test's allowed roots, and its model and data
    directories exist there (a save refuses paths that do not exist on the server)."""
    demo, runs = tmp_path / "demo", tmp_path / "runs"
    (demo / "model").mkdir(parents=True)
    (demo / "gsm8k").mkdir()
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo))
    monkeypatch.delenv("TRINITY_CHECKPOINT_ROOT_DIR", raising=False)
    settings.RFT_ALLOWED_PATH_ROOTS = [demo, runs]
    settings.RFT_RUNS_DIR = runs
    return demo, runs


@pytest.fixture
def world(tmp_path, settings):
    """The users, experiments, runs and checkpoints the authorization and CSRF matrices ask
    about (``route_matrix.World``)."""
    from route_matrix import build_world

    return build_world(tmp_path, settings)


@pytest.fixture
def bob():
    """A second user, who must see none of alice's objects."""
    return make_user("bob")


@pytest.fixture
def root(client):
    """A superuser, signed in on ``client`` (the admin's pages)."""
    user = get_user_model().objects.create_superuser("root", password=None)
    client.force_login(user)
    return user


@pytest.fixture
def parent(alice, roots):
    """Alice's finished demo run with a full rft-stage checkpoint at step 20 on disk."""
    run, job_dir = finished_demo_run(alice, roots[1])
    step_dir = full_checkpoint(job_dir / "rft", 20)
    return run, Checkpoint.objects.create(run=run, stage="rft", step=20, path=str(step_dir))


@pytest.fixture
def run_with_checkpoints(alice, roots):
    """Alice's finished demo run with full checkpoints rft 10, rft 20 and sft_warmup 10 on disk."""
    run, job_dir = finished_demo_run(alice, roots[1])
    checkpoints = [
        Checkpoint.objects.create(
            run=run, stage=stage, step=step, path=str(full_checkpoint(job_dir / stage, step))
        )
        for stage, step in (("rft", 10), ("rft", 20), ("sft_warmup", 10))
    ]
    return run, checkpoints
