"""An SFT stage's held-out eval (rft_core.trainer.held_out_eval): real runs on Ray with the demo's
tiny model. 5 SFT steps at a high learning rate on one answer, twelve 1s, teach the model to
answer every question with it (measured: from step 2 on), so the held-out accuracy moves from 0
to 1/2 (the first eval question's answer is that number, the second's is not); each eval row
must be what a greedy eval of the weights at that step gives."""

import json
from pathlib import Path

import pytest
from run_configs import minimal_config, run_config, sft_stage

from rft_core.checkpoint.layout import actor_dir, step_dir
from rft_core.checkpoint.store import load_state_dict
from rft_core.config import load_config_from_dict, resolve_stages
from rft_core.data.taskset import read_explorer_tasksets
from rft_core.rollout import build_engine, engine_settings
from rft_core.runtime.launcher import run_experiment
from rft_core.trainer.held_out_eval import sft_eval_interval
from rft_core.workflows.evaluation import evaluate_tasksets

ACCURACY = "eval/held-out/accuracy/mean@1"
TAUGHT = "1" * 12  # the answer the SFT rows teach (12 tokens: one per digit)
QUESTIONS = [("What is 92 + 14?", TAUGHT), ("What is 74 + 80?", "154")]


def _sft_stage_config(demo, root: Path, name: str, *, with_evals: bool) -> dict:
    """One SFT stage of 5 steps of 4 rows teaching ``TAUGHT``; the run's global
    buffer lists the 2-question eval taskset (with_evals), which the stage inherits."""
    data = root / f"{name}-data"
    data.mkdir()
    rows = [
        {
            "messages": [
                {"role": "system", "content": "Think, then answer."},
                {"role": "user", "content": QUESTIONS[0][0]},
                {"role": "assistant", "content": TAUGHT},
            ]
        }
    ] * 8
    (data / "sft.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    evals = [{"question": q, "answer": f"#### {a}"} for q, a in QUESTIONS]
    (data / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in evals))
    cfg = run_config(
        demo,
        root,
        name,
        model={"max_response_tokens": 12, "max_model_len": 96},
        explorer={"eval_on_startup": True, "eval_interval": 1000},
        trainer={
            "save_interval": 2,
            "save_hf_checkpoint": "last",
            "sft_eval_interval": 2,
            "max_checkpoints_to_keep": 0,
        },
    )
    if with_evals:
        held_out = {
            "name": "held-out",
            "storage_type": "file",
            "path": str(data / "eval.jsonl"),
            "format": {
                "prompt_key": "question",
                "response_key": "answer",
                "system_prompt": "Think, then answer.",
            },
            "rollout_args": {"temperature": 0.0},
            "default_workflow_type": "math_workflow",
        }
        cfg["buffer"]["explorer_input"]["eval_tasksets"] = [held_out]
    cfg["stages"] = [sft_stage(data / "sft.jsonl", total_steps=5, optimizer={"lr": 1e-2})]
    return cfg


def _metric_rows(job_dir: Path) -> list[dict]:
    path = job_dir / "monitor" / "trainer_metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def sft_runs(demo, local_ray, tmp_path_factory):
    """The SFT stage run with the eval tasksets and without: (its stage config, its job dir)."""
    root = tmp_path_factory.mktemp("sft_eval")
    out = {}
    for with_evals in (True, False):
        cfg = load_config_from_dict(
            _sft_stage_config(demo, root, f"evals-{with_evals}", with_evals=with_evals)
        )
        (stage,) = resolve_stages(cfg)
        result = run_experiment(cfg).last
        assert result.trainer["steps"] == 5
        out[with_evals] = (stage, Path(result.job_dir))
    return out


@pytest.mark.slow
def test_an_sft_stage_evaluates_its_checkpoints_at_start_every_interval_and_at_the_end(sft_runs):
    stage, job_dir = sft_runs[True]
    rows = [r for r in _metric_rows(job_dir) if ACCURACY in r]
    # eval_on_startup: step 0; sft_eval_interval 2: steps 2 and 4; the last step 5
    assert [r["step"] for r in rows] == [0, 2, 4, 5]
    accuracy = {r["step"]: r[ACCURACY] for r in rows}
    assert all(0.0 <= a <= 1.0 for a in accuracy.values())
    # the untrained model answers neither question; trained, it answers both with twelve 1s
    assert accuracy[0] == 0.0 and accuracy[5] == 0.5
    # each row is a greedy eval of the weights the trainer saved at that step
    settings = dict(engine_settings(stage), device="cpu")
    engine = build_engine("hf", stage.model.model_path, **settings)
    evals = read_explorer_tasksets(stage.buffer.explorer_input).evals
    assert evaluate_tasksets(evals, engine)[ACCURACY] == accuracy[0]  # the model it started from
    for step in (2, 4, 5):
        engine.load_weights(load_state_dict(actor_dir(step_dir(job_dir, step))), step)
        assert evaluate_tasksets(evals, engine)[ACCURACY] == accuracy[step], step
    log = (job_dir / "log" / "trainer.log").read_text()
    assert log.count("eval at trainer step") == 4
    assert "eval at trainer step 5:" in log


@pytest.mark.slow
def test_an_sft_stage_without_eval_tasksets_writes_no_eval_and_trains_the_same(sft_runs):
    _, with_evals = sft_runs[True]
    stage, job_dir = sft_runs[False]
    assert not stage.buffer.explorer_input.eval_tasksets
    rows = _metric_rows(job_dir)
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    assert not [k for r in rows for k in r if k.startswith("eval/")]
    # generating with the trainer's own model between steps leaves its training unchanged
    losses = [r["actor/sft_loss"] for r in rows]
    evaluated = [r["actor/sft_loss"] for r in _metric_rows(with_evals) if "actor/sft_loss" in r]
    assert evaluated == losses


def test_the_default_interval_is_the_explorers_widened_to_three_evals_a_stage():
    cfg = load_config_from_dict(minimal_config())
    cfg.explorer.eval_interval = 10
    assert sft_eval_interval(cfg, 20) == 10  # 2 evals: the explorer's interval
    assert sft_eval_interval(cfg, 450) == 150  # the demo's 450 steps: 150, 300, 450
    assert sft_eval_interval(cfg, None) == 10  # a stage of unknown length
    cfg.trainer.sft_eval_interval = 3
    assert sft_eval_interval(cfg, 450) == 3
