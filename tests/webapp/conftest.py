"""Fixtures shared by the web tests."""

from __future__ import annotations

import pytest


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
