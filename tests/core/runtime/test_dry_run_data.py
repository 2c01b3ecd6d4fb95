"""``trinity run --dry-run`` runs every data check the run makes at its start (issue 22, item 5):
a taskset without its ``format.response_key`` column (Trinity's frozen-lake data has none), an
SFT file without its messages column, fail the dry run as they fail the start; a dataset that
is not on this machine (it may be where the run starts) is a note, and the dry run passes."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import yaml
from run_configs import dry_run

from rft_core.runtime.launcher import cli_run


def _config(tmp_path: Path, taskset_path: str, **extra) -> Path:
    cfg = {
        "model": {"model_path": "/models/not-here", "max_model_len": 256},
        "cluster": {"gpu_per_node": 0},
        "buffer": {
            "batch_size": 2,
            "total_steps": 1,
            "explorer_input": {
                "taskset": {
                    "name": "lakes",
                    "path": taskset_path,
                    "format": {"prompt_key": "question", "response_key": "response"},
                    "default_workflow_type": "math_workflow",
                }
            },
        },
        **extra,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _rows(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_a_missing_response_column_fails_the_dry_run_in_one_line(tmp_path):
    data = _rows(tmp_path / "lakes.jsonl", [{"question": "walk", "size": 4, "p": 0.8, "seed": 1}])
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRINITY_")}
    proc = dry_run(_config(tmp_path, data), cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr[-2000:]
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in proc.stderr
    assert (
        "buffer.explorer_input.taskset.format.response_key: column 'response' is not in" in err[0]
    )
    assert "columns present: question, size, p, seed" in err[0]


def test_a_dataset_not_on_this_machine_is_a_note(tmp_path, capsys):
    args = argparse.Namespace(
        config=str(_config(tmp_path, str(tmp_path / "on-the-cluster.jsonl"))),
        dry_run=True,
        overrides=[],
    )
    assert cli_run(args) == 0
    err = capsys.readouterr().err
    assert "dry run: not checked here, checked when the run starts: " in err
    assert "buffer.explorer_input.taskset.path: " in err and "does not exist" in err


def test_an_sft_file_without_its_messages_column_fails_the_dry_run(tmp_path):
    data = _rows(tmp_path / "lakes.jsonl", [{"question": "walk", "response": "up"}])
    sft = _rows(tmp_path / "sft.jsonl", [{"prompt": "p", "completion": "c"}])
    stage = {
        "stage_name": "warmup",
        "mode": "train",
        "algorithm": {"algorithm_type": "sft"},
        "buffer": {
            "train_batch_size": 1,
            "total_steps": 1,
            "trainer_input": {
                "experience_buffer": {
                    "name": "sft",
                    "storage_type": "file",
                    "path": sft,
                    "format": {"messages_key": "messages"},
                }
            },
        },
    }
    args = argparse.Namespace(
        config=str(_config(tmp_path, data, stages=[stage, {"stage_name": "rft"}])),
        dry_run=True,
        overrides=[],
    )
    from rft_core.errors import RFTError

    try:
        cli_run(args)
    except RFTError as err:
        text = str(err)
    else:
        raise AssertionError("the dry run passed an SFT file without its messages column")
    assert text.startswith("stages[0].buffer.trainer_input.experience_buffer.format."), text
    assert "no 'messages' messages column" in text and "columns present: " in text
