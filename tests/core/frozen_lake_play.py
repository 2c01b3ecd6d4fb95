"""Frozen lake played by a script (the multi-turn workflow tests and the turn-advantage tests):
``ScriptedEngine`` renders each conversation with the demo tokenizer and answers it with a
script; ``expert`` walks a board's shortest path; ``lake_task`` a seeded lake."""

from __future__ import annotations

from rft_core.data.task import Task
from rft_core.demo import IM_END, build_tokenizer
from rft_core.rollout.base import Generation, PromptEncoding, SamplingParams
from rft_core.workflows.frozen_lake import shortest_path


class ScriptedEngine(PromptEncoding):
    """Renders conversations with the demo tokenizer; answers each conversation with
    ``script(conversation_text)``; records the batch size of every call."""

    def __init__(self, script):
        self.tokenizer = build_tokenizer()
        self.chat_template_kwargs = {}
        self.model_version = 3
        self.script = script
        self.calls: list[int] = []

    def generate_ids(self, prompt_ids, params: SamplingParams):
        assert params.n == 1
        self.calls.append(len(prompt_ids))
        im_end = self.tokenizer.convert_tokens_to_ids(IM_END)
        out = []
        for ids in prompt_ids:
            text = self.script(self.tokenizer.decode(ids))
            response = self.tokenizer(text, add_special_tokens=False)["input_ids"] + [im_end]
            out.append([Generation(list(ids), response, [-0.1] * len(response), text, "stop")])
        return out


def lake_task(index: int, seed: int, size: int = 3) -> Task:
    """A seeded lake of ``size`` x ``size`` for ``frozen_lake_workflow``, 6 steps at most."""
    return Task(
        index=index,
        taskset="lake",
        raw={"size": size, "p": 0.8, "seed": seed},
        prompt=f"lake {seed}",
        workflow="frozen_lake_workflow",
        rollout_args={"temperature": 1.0, "max_tokens": 16},
        workflow_args={"max_steps": 6},
    )


def expert(board: list[str]):
    """A script that walks the shortest path of ``board`` from wherever P stands."""
    names = {1: "Left", 2: "Down", 3: "Right", 4: "Up"}

    def answer(conversation: str) -> str:
        grid = conversation.rsplit("Current Observation", 1)[1].split("\n")[1:]
        rows = [line.replace(" ", "").split("\t")[:-1] for line in grid[: len(board)]]
        r, c = next((r, c) for r, row in enumerate(rows) for c, x in enumerate(row) if x == "P")
        here = [
            "".join(
                "S" if (i, j) == (r, c) else ("F" if x == "S" else x) for j, x in enumerate(row)
            )
            for i, row in enumerate(board)
        ]
        return f"Go. ```{names[shortest_path(here)[0]]}```"

    return answer


def first_grid(board: list[str]) -> str:
    """The board as its first observation shows it (the player on S), to recognise a lake."""
    cells = {"S": " P \t", "F": " _ \t", "H": " O \t", "G": " G \t"}
    return "\n".join("".join(cells[x] for x in row) for row in board)
