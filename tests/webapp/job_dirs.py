"""Job dirs as ``trinity run`` leaves them, written by rft_core's own writers (JsonlSink,
log_to_file), for the tests of importing, registering and claiming them."""

from __future__ import annotations

import logging
from pathlib import Path

from rft_core.actors.actor_log import log_to_file
from rft_core.checkpoint import layout
from rft_core.monitor.events import MonitorEvent
from rft_core.monitor.sinks import JsonlSink

DEMO = (Path(__file__).resolve().parents[2] / "examples" / "demo" / "grpo_demo.yaml").read_text()
# the demo config as a terminal user renamed it (the CLI sends it resolved; interpolations pass)
CONFIG = DEMO.replace("project: demo", "project: terminal-proj").replace(
    "name: grpo_demo", "name: from-terminal"
)


def write_job_dir(job_dir, *, end: str | None = "finished", stage: str = "", config: bool = True):
    """A job dir as a finished run leaves it: its config.yaml (as ``trinity run`` writes it),
    metrics, status, samples, a log, one checkpoint."""
    stage_dir = job_dir / stage if stage else job_dir
    if config:
        job_dir.mkdir(parents=True, exist_ok=True)
        text = DEMO.replace("project: demo", f"project: {job_dir.parent.name}")
        (job_dir / layout.RUN_CONFIG).write_text(
            text.replace("name: grpo_demo", f"name: {job_dir.name}")
        )
    sink = JsonlSink(stage_dir / "monitor", "trainer")
    t0 = 1_760_000_000.0
    for step in (1, 2, 3):
        sink.write(MonitorEvent("x", "metric", "trainer", step, {"actor/pg_loss": 0.5 / step},
                                t0 + step))  # fmt: skip
    sink.write(MonitorEvent("x", "status", "trainer", None, {"state": "running"}, t0))
    ckpt = layout.step_dir(stage_dir, 2)
    (ckpt / layout.ACTOR_DIR).mkdir(parents=True)
    (ckpt / layout.FULL_CHECKPOINT_MARKER).write_text("")
    sink.write(MonitorEvent("x", "checkpoint", "trainer", 2, {"path": str(ckpt)}, t0 + 2.5))
    sample = {"prompt": "1+1?", "response": "2", "truth": "2", "reward": 1.0}
    sink.write(MonitorEvent("x", "samples", "explorer", 3, {"samples": [sample, sample]}, t0 + 3))
    if end:
        sink.write(MonitorEvent("x", "status", "trainer", None, {"state": end}, t0 + 4))
    sink.close()
    logger = logging.getLogger("rft_core.import_test")
    log_to_file(stage_dir / "log" / "trainer.log", "rft_core.import_test")
    logger.info("trainer step 1 done")
    logger.warning("a warning\nwith a second line")
    for handler in list(logger.handlers):
        handler.close()
        logger.removeHandler(handler)
    return ckpt
