"""The demo's multi-turn task: small FrozenLake maps for ``frozen_lake_workflow`` on the tiny
demo model (``examples/demo/frozen_lake_demo.yaml``), written by ``trinity init-demo``::

    DIR/frozen_lake/train.jsonl   {"prompt", "size", "p", "seed"} rows: one 3x3 lake each
    DIR/frozen_lake/test.jsonl    held-out lakes (other seeds)
    DIR/sft/frozen_lake.jsonl     multi-turn messages rows for the SFT warmup stage

The lakes are 3x3, 80% frozen, not slippery, the goal within ``MAX_STEPS`` moves. The model
reads one token per character, so the demo uses the short system prompt below and the "short"
observations (the lake and the steps left). The SFT episodes are played in the real environment
by a teacher that takes the shortest-path move ``TEACHER_SKILL`` of the time and otherwise a
random move that stays on the lake and out of the holes: the warmup teaches the answer format
and some of the way, and leaves GRPO room to raise the success rate.
"""

from __future__ import annotations

import random

SYSTEM_PROMPT = "Reach G, avoid O."  # the warmup teaches the ```Down``` answers
SIZE, FROZEN, MAX_STEPS = 3, 0.8, 4
TRAIN_SIZE, TEST_SIZE, SFT_EPISODES = 2000, 100, 2000
TEACHER_SKILL = 0.5  # this teacher wins ~76% of the held-out lakes (a safe random walk ~35%)
ACTION_NAMES = {1: "Left", 2: "Down", 3: "Right", 4: "Up"}


def lake_seeds(seed: int) -> tuple[list[int], list[int]]:
    """Disjoint (train, test) map seeds drawn with ``seed``."""
    drawn = random.Random(seed).sample(range(10**6), TRAIN_SIZE + TEST_SIZE)
    return drawn[:TRAIN_SIZE], drawn[TRAIN_SIZE:]


def taskset_rows(seeds: list[int]) -> list[dict]:
    return [{"prompt": f"frozen lake {s}", "size": SIZE, "p": FROZEN, "seed": s} for s in seeds]


def teacher_action(board: list[str], position: tuple[int, int], rng: random.Random) -> int:
    """The shortest-path move with probability ``TEACHER_SKILL``, else a random safe move."""
    from rft_core.workflows.frozen_lake import MOVES, shortest_path

    path = shortest_path(board, start=position)
    if path and rng.random() < TEACHER_SKILL:
        return path[0]
    safe = [
        action
        for action, (dr, dc) in MOVES.items()
        if 0 <= position[0] + dr < SIZE
        and 0 <= position[1] + dc < SIZE
        and board[position[0] + dr][position[1] + dc] != "H"
    ]
    return rng.choice(safe or list(MOVES))


def sft_rows(seeds: list[int], seed: int) -> list[dict]:
    """One teacher episode per map seed, as the workflow would render it (messages rows)."""
    from rft_core.workflows.frozen_lake import FrozenLake, random_map

    rng = random.Random(seed)
    rows = []
    for s in seeds[:SFT_EPISODES]:
        board = random_map(SIZE, FROZEN, s, MAX_STEPS)
        env = FrozenLake(
            board,
            max_steps=MAX_STEPS,
            is_slippery=False,
            seed=s,
            system=SYSTEM_PROMPT,
            prompt_style="short",
        )
        messages = env.first_messages()
        while True:
            answer = f"```{ACTION_NAMES[teacher_action(board, env.position, rng)]}```"
            messages.append({"role": "assistant", "content": answer})
            result = env.step(answer)
            if result.done:
                break
            messages.append({"role": "user", "content": result.observation})
        rows.append({"messages": messages})
    return rows
