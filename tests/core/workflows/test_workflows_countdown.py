"""``countdown_workflow``: TinyZero's instruction from ``nums``/``target`` columns, the JSON
truth it builds, and Countdown scores; rows without those columns pass through as they are."""

from __future__ import annotations

import json

from workflow_engines import ScriptedEngine

from rft_core import workflows
from rft_core.data.task import Task
from rft_core.workflows.countdown import COUNTDOWN_SYSTEM_PROMPT, countdown_instruction


def test_instruction_and_truth_come_from_the_numbers_and_target_columns():
    instruction = countdown_instruction([4, 6, 1, 3], 24)
    replies = {
        instruction: [
            "<think>6/(1-3/4)</think>\n<answer>6 / (1 - 3 / 4)</answer>",
            "<think>..</think>\n<answer>4 + 6 + 1 + 3</answer>",
            "I give up",
        ]
    }
    row = {"nums": [4, 6, 1, 3], "target": 24, "question": "ignored"}
    t = Task(index=0, taskset="countdown", raw=row, prompt="ignored", truth=None)
    engine = ScriptedEngine(replies)
    exps = workflows.get("countdown_workflow")({}).run_batch([t], engine, 3)
    assert engine.calls[0][0][0] == [
        {"role": "system", "content": COUNTDOWN_SYSTEM_PROMPT},
        {"role": "user", "content": instruction},
    ]
    assert [e.metrics for e in exps] == [{"score": 1.0}, {"score": 0.1}, {"score": 0.0}]
    assert exps[0].info["reward_fn"] == "countdown_reward"


def test_rows_in_trinitys_question_answer_form_pass_through():
    truth = json.dumps({"target": 10, "numbers": [2, 5]})
    t = Task(
        index=3, taskset="cd", raw={}, prompt="make 10 from 2, 5", truth=truth, system_prompt=""
    )
    engine = ScriptedEngine({"make 10 from 2, 5": ["<answer>2 * 5</answer>"]})
    exps = workflows.get("countdown_workflow")({}).run_batch([t], engine, 1)
    assert engine.calls[0][0][0] == [{"role": "user", "content": "make 10 from 2, 5"}]
    assert exps[0].reward == 1.0
