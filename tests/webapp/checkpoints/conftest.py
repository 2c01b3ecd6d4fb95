"""Fixtures of the checkpoint tests (retention's pruned rows, on the server and in the browser)."""

from __future__ import annotations

import json

import pytest
from demo_rows import finished_demo_run, full_checkpoint

from rft_core.checkpoint.retention import prune_checkpoints
from webapp.checkpoints.actions import sync_checkpoints
from webapp.checkpoints.models import Checkpoint


@pytest.fixture
def pruned_run(alice, roots):
    """Alice's demo run (keep 1 + the best) whose rft stage saved steps 10, 20 and 30, with
    eval accuracy 0.9 / 0.5 / 0.6: retention keeps 30 (newest) and 10 (best), deletes 20."""
    run, job_dir = finished_demo_run(alice, roots[1])
    trainer = run.config["trainer"]
    assert trainer["max_checkpoints_to_keep"] == 1
    best = trainer["best_checkpoint_metric"]
    stage = job_dir / "rft"
    for step in (10, 20, 30):
        full_checkpoint(stage, step)
    (stage / "monitor").mkdir()
    rows = [{"step": s, best: v} for s, v in ((10, 0.9), (20, 0.5), (30, 0.6))]
    (stage / "monitor" / "explorer_metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    assert sync_checkpoints(run)  # the rows, all on disk
    assert prune_checkpoints(stage, 1, best_metric=best) == [20]
    sync_checkpoints(run)
    return run, {c.step: c for c in Checkpoint.objects.filter(run=run, stage="rft")}
