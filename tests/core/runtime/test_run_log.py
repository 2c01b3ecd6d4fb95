"""The run's log (``rft_core.runtime.run_log``): ``trinity run`` with its stderr in a file tells
the run's story (each stage and role starting and ending, each eval with its numbers, each
checkpoint, progress lines with step/total) without Ray's start-up notices; ``--quiet`` and
``log.level: warning`` leave only warnings and errors; a run without Ray (``InProcessRun``)
tells the same story."""

from __future__ import annotations

import json
import logging
import math
import os
import re
from pathlib import Path

import pytest
import yaml
from run_configs import colocate_eval_config, trinity_run_to_file

from rft_core.config import load_config_from_dict
from rft_core.runtime.in_process import InProcessRun
from rft_core.runtime.run_log import StageLog

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo" / "grpo_demo.yaml"
ACCURACY = "arithmetic-eval/accuracy/mean@1"
LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (INFO|WARNING|ERROR) [\w.]+\.py:\d+\] ")
# the demo shrunk: 2 SFT steps, 2 GRPO steps of 2 tasks x 2 samples, an eval and a save at step 2
SHRUNK = (
    "stages[0].buffer.total_steps=2",
    "stages[0].buffer.train_batch_size=8",
    "buffer.total_steps=2",
    "buffer.batch_size=2",
    "algorithm.repeat_times=2",
    "model.max_response_tokens=8",
    "explorer.eval_on_startup=false",
    "explorer.eval_interval=2",
    "trainer.save_interval=2",
    "log.progress_steps=1",
)


def _env(demo, checkpoints: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRINITY_", "RAY_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        RFT_DEMO_DIR=str(demo.root),
        TRINITY_CHECKPOINT_ROOT_DIR=str(checkpoints),
        OMP_NUM_THREADS="1",
    )
    return env


def _log_of(config: Path, log_file: Path, *args: str, env: dict) -> list[str]:
    """The lines of ``trinity run`` with stdout and stderr in ``log_file``; the run succeeded."""
    code = trinity_run_to_file(config, log_file, *args, cwd=log_file.parent, env=env, timeout=600)
    text = log_file.read_text()
    assert code == 0, text[-3000:]
    return text.splitlines()


def _shown(line: str, metric: str) -> float:
    return float(re.search(re.escape(metric) + r"=([-\d.e]+)", line).group(1))


def _eval_metric(job_dir: Path, metric: str, role: str = "explorer") -> dict[int, float]:
    """{step: value} of an eval metric in the role's monitor metrics file."""
    rows = [json.loads(r) for r in (job_dir / "monitor" / f"{role}_metrics.jsonl").open()]
    return {r["step"]: r[metric] for r in rows if metric in r}


@pytest.mark.slow
def test_a_demo_run_with_stderr_in_a_file_logs_stages_roles_evals_checkpoints_and_progress(
    demo, tmp_path
):
    lines = _log_of(DEMO, tmp_path / "run.log", *SHRUNK, env=_env(demo, tmp_path / "ck"))
    job = tmp_path / "ck" / "demo" / "grpo_demo"
    text = "\n".join(lines)
    # every stderr line in Trinity's INFO shape; stdout has the closing summary, one per stage
    assert [line.split(": mode ")[0] for line in lines if not LINE.match(line)] == [
        "sft_warmup",
        "rft",
    ], text
    messages = [LINE.sub("", line) for line in lines if LINE.match(line)]
    sft_start = messages.index(
        f"stage sft_warmup started: mode train, 2 steps, job dir {job / 'sft_warmup'}"
    )
    rft_start = messages.index(f"stage rft started: mode both, 2 steps, job dir {job / 'rft'}")
    (sft_end,) = [
        i for i, m in enumerate(messages) if m.startswith("stage sft_warmup finished in ")
    ]
    (rft_end,) = [i for i, m in enumerate(messages) if m.startswith("stage rft finished in ")]
    assert sft_start < sft_end < rft_start < rft_end, text
    sft, rft = messages[sft_start:sft_end], messages[rft_start:rft_end]
    # each role's start and end, in its stage
    assert sft.index("sft_warmup: trainer started") < sft.index(
        "sft_warmup: trainer finished at step 2"
    )
    assert rft.index("rft: explorer started at step 0") < rft.index(
        "rft: explorer finished at step 2"
    )
    assert rft.index("rft: trainer started") < rft.index("rft: trainer finished at step 2")
    # a progress line per step (log.progress_steps=1) with step/total and the key metric
    assert any(m.startswith("sft_warmup: step 1/2 (50%), loss ") for m in sft), text
    assert any(
        m.startswith("sft_warmup: step 2/2 (100%), loss ") and ", token accuracy " in m for m in sft
    ), text
    assert any(m.startswith("rft: step 1/2 (50%), reward ") for m in rft), text
    assert any(re.match(r"rft: step 2/2 \(100%\), reward .*, [\d.]+ steps/s", m) for m in rft), text
    # the eval at step 2 with the accuracy the explorer's metrics file holds; in SFT, the
    # trainer's held-out eval of the run's eval taskset at its last step (2), in its own file
    (eval_line,) = [m for m in rft if m.startswith("rft: eval at step 2: ")]
    logged = _eval_metric(job / "rft", f"eval/{ACCURACY}")[2]
    assert math.isclose(_shown(eval_line, ACCURACY), logged, abs_tol=1e-4), eval_line
    (sft_eval,) = [m for m in sft if " eval at " in m]
    assert sft_eval.startswith("sft_warmup: eval at step 2: "), sft_eval
    sft_logged = _eval_metric(job / "sft_warmup", f"eval/{ACCURACY}", role="trainer")[2]
    assert math.isclose(_shown(sft_eval, ACCURACY), sft_logged, abs_tol=1e-4), sft_eval
    # each stage's checkpoint named, and on disk
    for stage, lines_of in (("sft_warmup", sft), ("rft", rft)):
        path = job / stage / "global_step_2"
        saved = f"{stage}: checkpoint global_step_2 saved by the trainer ({path})"
        assert saved in lines_of, text
        assert (path / ".full_checkpoint").exists()
    # Ray's start-up notices and the actors' forwarded output stay out
    assert "Token authentication is enabled" not in text
    assert "pid=" not in text


@pytest.mark.slow
def test_quiet_and_log_level_warning_leave_warnings_and_errors_only(demo, tmp_path):
    d = yaml.safe_load(DEMO.read_text())  # the demo's SFT warmup alone, 2 steps
    sft = d.pop("stages")[0]
    d.update(mode="train", name="sft_only", algorithm=sft["algorithm"])
    d["buffer"].update(sft["buffer"], total_steps=2, train_batch_size=8)
    d["log"] = {"progress_steps": 1}
    config = tmp_path / "sft_only.yaml"
    config.write_text(yaml.safe_dump(d))
    # a Trinity key RFT Studio does not act on: its warning still comes through
    warned = "log.group_by_node=true"
    for name, quiet in (("quiet", "--quiet"), ("level", "log.level=WARNING")):
        env = _env(demo, tmp_path / name)
        lines = _log_of(config, tmp_path / f"{name}.log", quiet, warned, env=env)
        text = "\n".join(lines)
        logged = [line for line in lines if LINE.match(line)]
        assert logged and all(" WARNING " in line for line in logged), text
        assert any("log.group_by_node" in line for line in logged), text
        assert " INFO " not in text and "step 1/2" not in text and "stage sft_only" not in text
        assert lines[-1].startswith("sft_only: mode train, 2 trainer steps"), text
        assert (tmp_path / name / "demo" / "sft_only" / "global_step_2").is_dir()


@pytest.mark.slow
def test_a_run_without_ray_logs_the_same_lines(demo, tmp_path, caplog):
    cfg = colocate_eval_config(demo, tmp_path, "no_ray", steps=2, eval_interval=2)
    cfg["trainer"]["save_interval"] = 2
    cfg["log"] = {"progress_steps": 1}
    config = load_config_from_dict(cfg)
    caplog.set_level(logging.INFO, logger="rft_core.run")
    with StageLog(config) as stage_log:
        InProcessRun(config).run(stage_log=stage_log)
    messages = [r.getMessage() for r in caplog.records if r.name == "rft_core.run"]
    job_dir = tmp_path / "orchestration" / "no_ray"
    assert messages[0] == f"stage no_ray started: mode colocate, 2 steps, job dir {job_dir}"
    assert "no_ray: trainer started" in messages
    assert "no_ray: explorer started at step 0" in messages
    assert any(m.startswith("no_ray: step 1/2 (50%), reward ") for m in messages), messages
    assert any(m.startswith("no_ray: step 2/2 (100%), reward ") for m in messages), messages
    (eval_line,) = [m for m in messages if m.startswith("no_ray: eval at step 2: ")]
    accuracy = "held-out/accuracy/mean@1"
    logged = _eval_metric(job_dir, f"eval/{accuracy}")[2]
    assert math.isclose(_shown(eval_line, accuracy), logged, abs_tol=1e-4), eval_line
    assert (
        f"no_ray: checkpoint global_step_2 saved by the trainer ({job_dir / 'global_step_2'})"
        in messages
    )
    assert (job_dir / "global_step_2").is_dir()
    assert "no_ray: explorer finished at step 2" in messages
    assert messages[-1].startswith("stage no_ray finished in ")
