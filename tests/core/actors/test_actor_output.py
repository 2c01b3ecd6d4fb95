"""What the explorer and the trainer print reaches the run's log (``rft_core.actors.actor_log``): a
real run of the demo model whose plugin workflow (explorer) and plugin policy loss (trainer)
print to stdout and stderr, warn, and log through a ``transformers`` logger (which does not
propagate to the root), in one process (``InProcessRun``) and through Ray (``trinity run``),
read back from the role's log file, the Redis event stream the ingestor consumes, and the
replay of the job dir; a runaway print loop stops at the cap with a "lines dropped" line."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest
import redis
from run_configs import run_config, trinity_run

from rft_core.config import load_config_from_dict
from rft_core.monitor import MonitorEvent, stream_key
from rft_core.monitor.replay import read_job_events
from rft_core.plugins import load_plugins
from rft_core.runtime.in_process import InProcessRun

ROOT = Path(__file__).resolve().parents[3]
CAP = 40
RUNAWAY = 300  # lines the explorer's workflow prints on its first task: far over the cap

PLUGIN = f"""
import logging
import sys
import warnings

import functools

from rft_core.algorithms.policy_losses import ppo_clip_loss, register_policy_loss
from rft_core.workflows import register
from rft_core.workflows.math import MathWorkflow

_calls = {{"explorer": 0}}


@register("noisy_math_workflow")
class NoisyMath(MathWorkflow):
    def messages(self, task):
        _calls["explorer"] += 1
        if _calls["explorer"] == 1:
            print("explorer says hello")
            print("explorer complains", file=sys.stderr)
            for i in range({RUNAWAY}):
                print(f"runaway line {{i}}")
        return super().messages(task)


@register_policy_loss("noisy_ppo", "advantages")
@functools.wraps(ppo_clip_loss)
def noisy_ppo(*args, **kwargs):
    print("trainer says hello, partial", end="")
    print(" line joined")
    print("trainer complains", file=sys.stderr)
    warnings.warn("a deprecated argument, said by a library")
    logging.getLogger("transformers.noisy").warning("transformers warned the trainer")
    return ppo_clip_loss(*args, **kwargs)
"""


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    directory = tmp_path / "plugins"
    directory.mkdir()
    (directory / f"noisy_{uuid.uuid4().hex[:8]}.py").write_text(PLUGIN)
    monkeypatch.setenv("TRINITY_PLUGIN_DIRS", str(directory))
    monkeypatch.setenv("RFT_ACTOR_OUTPUT_MAX_LINES", str(CAP))
    return directory


def _noisy_config(demo, root: Path, name: str, **sections) -> dict:
    cfg = run_config(demo, root, name, **sections)
    cfg["buffer"]["total_steps"] = 2
    cfg["buffer"]["explorer_input"]["taskset"]["default_workflow_type"] = "noisy_math_workflow"
    cfg["algorithm"]["policy_loss_fn"] = "noisy_ppo"
    return cfg


def _log_events(redis_url: str, run_id: str, prefix: str) -> list[MonitorEvent]:
    client = redis.Redis.from_url(redis_url)
    try:
        entries = client.xrange(stream_key(run_id, prefix))
        client.delete(stream_key(run_id, prefix))
    finally:
        client.close()
    events = [MonitorEvent.from_fields(fields) for _, fields in entries]
    return [e for e in events if e.kind == "log"]


def _check_the_record(job_dir: Path, logs: list[MonitorEvent]) -> None:
    explorer_log = (job_dir / "log" / "explorer.log").read_text()
    trainer_log = (job_dir / "log" / "trainer.log").read_text()
    # the file: the role's logger, the stream as its child, a level
    assert "INFO rft_core.stdout: explorer says hello" in explorer_log
    assert "WARNING rft_core.stderr: explorer complains" in explorer_log
    assert "trainer says hello, partial line joined" in trainer_log
    assert "trainer says hello" not in explorer_log
    assert "explorer says hello" not in trainer_log
    assert "trainer complains" in trainer_log
    assert "transformers.noisy: transformers warned the trainer" in trainer_log
    assert "a deprecated argument, said by a library" in trainer_log

    # the stream the ingestor stores (role, level, text): what the run page and logs.txt show
    by_text = {(e.role, e.data["level"], e.data["text"]) for e in logs}
    assert ("explorer", "INFO", "explorer says hello") in by_text
    assert ("explorer", "WARNING", "explorer complains") in by_text
    assert ("trainer", "INFO", "trainer says hello, partial line joined") in by_text
    assert ("trainer", "WARNING", "trainer complains") in by_text
    assert ("trainer", "WARNING", "transformers.noisy: transformers warned the trainer") in by_text
    assert not any(
        e.role == "explorer" and "transformers warned the trainer" in e.data["text"] for e in logs
    )

    # the runaway loop: the cap, then one line that counts what was dropped
    runaway = [e for e in logs if e.data["text"].startswith("runaway line ")]
    assert 0 < len(runaway) < CAP
    assert f"runaway line {RUNAWAY - 1}" not in explorer_log
    dropped = [
        e for e in logs if e.data["text"].startswith("… ") and "lines dropped" in e.data["text"]
    ]
    assert [e.role for e in dropped] == ["explorer"]
    count = int(dropped[0].data["text"].split()[1])
    assert count >= RUNAWAY - CAP  # the loop's lines beyond the cap (and any later output)
    assert f"… {count} lines dropped" in explorer_log

    # the job dir read back (an imported run) has the same lines with their roles
    replayed = read_job_events(job_dir, "replayed").events
    texts = {(e.role, e.data["text"].split(": ", 1)[-1]) for e in replayed if e.kind == "log"}
    assert ("explorer", "explorer says hello") in texts
    assert ("trainer", "trainer complains") in texts


@pytest.mark.slow
def test_an_in_process_runs_prints_go_to_the_role_that_printed_them(
    demo, tmp_path, plugin_dir, monkeypatch
):
    run_id = f"out-{uuid.uuid4().hex[:8]}"
    prefix = f"t{uuid.uuid4().hex[:8]}"
    redis_url = "redis://127.0.0.1:6379/0"
    monkeypatch.setenv("RFT_EVENTS_REDIS_URL", redis_url)
    monkeypatch.setenv("RFT_REDIS_PREFIX", prefix)
    monkeypatch.setenv("RFT_RUN_ID", run_id)
    load_plugins([plugin_dir])
    cfg = _noisy_config(demo, tmp_path, "in_process", synchronizer={"sync_method": "memory"})
    cfg["mode"] = "colocate"
    writes = [vars(stream).get("write") for stream in (sys.stdout, sys.stderr)]
    InProcessRun(load_config_from_dict(cfg)).run()
    # the capture is gone with the run: the process's streams write as before
    assert [vars(stream).get("write") for stream in (sys.stdout, sys.stderr)] == writes

    job_dir = tmp_path / "orchestration" / "in_process"
    _check_the_record(job_dir, _log_events(redis_url, run_id, prefix))


@pytest.mark.slow
def test_a_ray_runs_actors_prints_reach_the_run_log(demo, tmp_path, plugin_dir):
    run_id = f"out-{uuid.uuid4().hex[:8]}"
    prefix = f"t{uuid.uuid4().hex[:8]}"
    redis_url = "redis://127.0.0.1:6379/0"
    cfg = _noisy_config(demo, tmp_path, "ray_run")
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(cfg))
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT),
        RFT_EVENTS_REDIS_URL=redis_url,
        RFT_REDIS_PREFIX=prefix,
        RFT_RUN_ID=run_id,
        OMP_NUM_THREADS="1",
    )
    env.pop("RAY_ADDRESS", None)
    done = trinity_run(
        config_path,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    job_dir = tmp_path / "orchestration" / "ray_run"
    _check_the_record(job_dir, _log_events(redis_url, run_id, prefix))


def test_the_capture_cuts_long_lines_keeps_a_progress_bars_last_state_and_counts_drops(
    tmp_path, monkeypatch
):
    from rft_core.actors.actor_log import (
        MAX_LINE_CHARS,
        capture_output,
        log_to_file,
        release_output,
        report_dropped,
    )

    monkeypatch.setenv("RFT_ACTOR_OUTPUT_MAX_LINES", "4")
    log_path = tmp_path / "explorer.log"
    log_to_file(log_path, "rft_core.capture_test")
    capture_output("explorer", "rft_core.capture_test")
    try:
        print("x" * (MAX_LINE_CHARS + 10))  # 1: cut, the rest counted
        print("step 1/3\rstep 2/3\rstep 3/3")  # 2: a progress bar's last state only
        sys.stdout.write("no end yet, ")  # 4: a line is whole at its end
        print("err", file=sys.stderr)  # 3: stderr's lines are its own
        for i in range(7):  # the first ends line 4; the others are over the cap: counted
            print(f"late {i}")
        report_dropped("explorer")
        print("later still")
        print("and once more")
    finally:
        release_output("explorer")
        logger = __import__("logging").getLogger("rft_core.capture_test")
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
            handler.close()
    lines = [line.split(" ", 3)[2:] for line in log_path.read_text().splitlines()]
    assert lines == [
        ["INFO", f"rft_core.capture_test.stdout: {'x' * MAX_LINE_CHARS}… (10 more characters)"],
        ["INFO", "rft_core.capture_test.stdout: step 3/3"],
        ["WARNING", "rft_core.capture_test.stderr: err"],
        ["INFO", "rft_core.capture_test.stdout: no end yet, late 0"],
        ["WARNING", "rft_core.capture_test.output: output cap of 4 lines reached "
         "(RFT_ACTOR_OUTPUT_MAX_LINES): later lines are counted, not kept"],
        ["WARNING", "rft_core.capture_test.output: … 6 lines dropped (the output cap of 4 lines "
         "per actor, RFT_ACTOR_OUTPUT_MAX_LINES)"],
        ["WARNING", "rft_core.capture_test.output: … 2 lines dropped (the output cap of 4 lines "
         "per actor, RFT_ACTOR_OUTPUT_MAX_LINES)"],
    ]  # fmt: skip
