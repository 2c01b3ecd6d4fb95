"""Trinity-RFT's task selectors ``random`` and ``difficulty_based`` (``rft_core.data.selectors``)
through the taskset reader: which rows each batch holds, from the seed, the stream position and
(difficulty_based) the rewards fed back. Hand-worked numbers in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from rft_core.config import load_config_from_dict
from rft_core.data import TasksetReader
from rft_core.data.selectors import DifficultySelector
from rft_core.data.taskset import load_taskset
from rft_core.errors import ConfigError

# weak / strong reference pass rates per row (BOTS' two feature columns)
FEATURES = [(0.0, 0.2), (0.2, 0.6), (0.5, 0.9), (0.8, 1.0)]


def _taskset(tmp_path: Path, selector: dict, rows: int = 10):
    path = tmp_path / "tasks.jsonl"
    lines = []
    for i in range(rows):
        weak, strong = FEATURES[i] if i < len(FEATURES) else (0.0, 0.0)
        lines.append(json.dumps({"q": f"q{i}", "a": str(i), "weak": weak, "strong": strong}))
    path.write_text("\n".join(lines) + "\n")
    cfg = load_config_from_dict(
        {
            "model": {"model_path": "/m", "max_model_len": 256, "max_response_tokens": 64},
            "algorithm": {"algorithm_type": "grpo", "repeat_times": 2},
            "buffer": {
                "batch_size": 2,
                "explorer_input": {
                    "taskset": {
                        "name": "t",
                        "path": str(path),
                        "format": {"prompt_key": "q", "response_key": "a"},
                        "data_selector": selector,
                    }
                },
            },
        }
    )
    return load_taskset(cfg.buffer.explorer_input.taskset)


def _rows(batch):
    return [t.index for t in batch]


def test_random_draws_each_batch_from_seed_plus_position(tmp_path):
    taskset = _taskset(tmp_path, {"selector_type": "random", "seed": 5})
    reader = TasksetReader(taskset, batch_size=3, total_steps=3)
    batches = [_rows(b) for b in reader]
    # Trinity's RandomSelector: default_rng(seed + tasks consumed before the batch)
    expected = [
        [int(i) for i in np.random.default_rng(5 + pos).choice(10, 3, replace=False)]
        for pos in (0, 3, 6)
    ]
    assert batches == expected
    assert all(len(set(b)) == 3 for b in batches)  # no row twice in a batch
    assert len({tuple(b) for b in batches}) == 3  # a new draw each step
    # a resumed reader draws the same next batch
    first = TasksetReader(taskset, batch_size=3, total_steps=3)
    first.next_batch()
    again = TasksetReader.from_state(taskset, first.state(), batch_size=3, total_steps=3)
    assert [_rows(b) for b in again] == batches[1:]


def test_difficulty_based_greedy_picks_and_feedback_by_hand(tmp_path):
    selector = {
        "selector_type": "difficulty_based",
        "feature_keys": ["weak", "strong"],
        "kwargs": {"target_reward": 0.5, "tau": 0},
    }
    taskset = _taskset(tmp_path, selector, rows=4)
    reader = TasksetReader(taskset, batch_size=2, total_steps=2)
    # start: every Beta(1, 1), pass rate 0.5 everywhere, equal scores: lowest rows first
    assert _rows(reader.next_batch()) == [0, 1]
    # rows 0 and 1 solved 0 of 2 and 1 of 2: pass rates 0.0 and 0.5
    reader.feedback({0: [0.0, 0.0], 1: [1.0, 0.0]})
    sel = reader._selector
    # c = (0.25 - mean weak 0.1) / (mean strong 0.4 - 0.1) = 0.5; prior of rows 2, 3:
    #   0.5 + 0.5*0.4 = 0.7, 0.8 + 0.5*0.2 = 0.9 (rows 0, 1 take their observed 0.0, 0.5)
    # alpha = 0.8*1 + 0.2 + 0.8*s + 0.2*16*prior, s = 16*observed on rows 0, 1:
    #   row0 1.0, row1 1 + 6.4 + 1.6 = 9.0, row2 1 + 2.24 = 3.24, row3 1 + 2.88 = 3.88
    # beta  = 1 + 0.8*f + 0.2*16*(1 - prior), f = 16*(1 - observed):
    #   row0 1 + 12.8 + 3.2 = 17.0, row1 9.0, row2 1 + 0.96 = 1.96, row3 1 + 0.32 = 1.32
    assert sel.alphas == pytest.approx([1.0, 9.0, 3.24, 3.88], abs=1e-4)
    assert sel.betas == pytest.approx([17.0, 9.0, 1.96, 1.32], abs=1e-4)
    # pass rates 1/18 = 0.056, 0.5, 3.24/5.2 = 0.623, 3.88/5.2 = 0.746; nearest 0.5: rows 1, 2
    assert _rows(reader.next_batch()) == [1, 2]
    # Trinity's default target 1.0 would take the easiest: rows 3, 2
    easy = DifficultySelector(np.array(FEATURES), 42, {"tau": 0}, "x")
    easy.alphas, easy.betas = sel.alphas.copy(), sel.betas.copy()
    assert easy.select(0, 2) == [3, 2]
    # the estimates travel through a checkpoint
    state = json.loads(json.dumps(reader.state()))
    again = TasksetReader.from_state(taskset, state, batch_size=2, total_steps=2)
    assert again._selector.alphas == pytest.approx(sel.alphas)


def test_difficulty_based_sampling_is_seeded(tmp_path):
    selector = {"selector_type": "difficulty_based", "feature_keys": ["weak", "strong"]}
    taskset = _taskset(tmp_path, selector, rows=4)
    one = [_rows(b) for b in TasksetReader(taskset, batch_size=2, total_steps=4)]
    two = [_rows(b) for b in TasksetReader(taskset, batch_size=2, total_steps=4)]
    assert one == two and all(len(set(b)) == 2 for b in one)


def test_difficulty_based_needs_its_two_columns(tmp_path):
    with pytest.raises(ConfigError) as info:
        TasksetReader(
            _taskset(tmp_path, {"selector_type": "difficulty_based", "feature_keys": ["weak"]}),
            batch_size=2,
        )
    assert info.value.path == "buffer.explorer_input.taskset.data_selector.feature_keys"
    assert "exactly 2 columns" in str(info.value)
    with pytest.raises(ConfigError, match="column 'hard' is not in"):
        TasksetReader(
            _taskset(
                tmp_path,
                {"selector_type": "difficulty_based", "feature_keys": ["weak", "hard"]},
            ),
            batch_size=2,
        )
    with pytest.raises(ConfigError, match="takes target_reward"):
        TasksetReader(
            _taskset(
                tmp_path,
                {
                    "selector_type": "difficulty_based",
                    "feature_keys": ["weak", "strong"],
                    "kwargs": {"temperature": 1},
                },
            ),
            batch_size=2,
        )


def test_selector_arguments_a_selector_does_not_read_are_warned_about(tmp_path, caplog):
    selector = {"selector_type": "random", "kwargs": {"tau": 0}}
    with caplog.at_level("WARNING"):
        TasksetReader(_taskset(tmp_path, selector), batch_size=2)
    assert (
        "buffer.explorer_input.taskset.data_selector.feature_keys / kwargs: selector_type "
        "random reads neither" in caplog.text
    )


def test_a_run_feeds_each_steps_rewards_back_to_the_selector(tmp_path):
    # a real 2-step run (explorer and trainer in one process, the demo model): after a step,
    # the rows it rolled out have their estimates moved by the rewards they earned
    import pyarrow.parquet as pq
    from run_configs import run_config

    from rft_core.demo import build_demo
    from rft_core.runtime.in_process import InProcessRun

    demo = build_demo(tmp_path / "demo")
    rows = pq.read_table(demo.train_path).to_pylist()[:4]
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(
        "".join(
            json.dumps({**r, "weak": FEATURES[i][0], "strong": FEATURES[i][1]}) + "\n"
            for i, r in enumerate(rows)
        )
    )
    cfg = run_config(demo, tmp_path, "selector", buffer={"batch_size": 2, "total_steps": 2})
    cfg["mode"] = "colocate"
    cfg["synchronizer"] = {"sync_method": "memory", "sync_interval": 1, "sync_offset": 0}
    ts = cfg["buffer"]["explorer_input"]["taskset"]
    ts.update(path=str(tasks), subset_name=None, split="train")
    ts["data_selector"] = {
        "selector_type": "difficulty_based",
        "feature_keys": ["weak", "strong"],
        "kwargs": {"tau": 0},
    }
    run = InProcessRun(load_config_from_dict(cfg))
    run.start()
    reader = run.explorer._reader
    assert run.step() is not None
    sel = reader._selector
    # step 1 took rows 0 and 1 (all estimates equal); feedback moved only their observed
    # parts: alpha + beta of an observed row = 0.8*2 + 0.4 + 0.8*16 + 0.2*16 = 18, of the
    # others 0.8*2 + 0.4 + 0.2*16 = 5.2
    assert (sel.alphas + sel.betas) == pytest.approx([18.0, 18.0, 5.2, 5.2])
    assert run.step() is not None
    assert run.finish()["trainer"]["steps"] == 2
