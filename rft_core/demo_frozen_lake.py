"""The demo's multi-turn task for ``frozen_lake_workflow`` on the tiny demo model
(``examples/demo/frozen_lake_demo.yaml``), written by ``trinity init-demo``::

    DIR/frozen_lake/train.jsonl   {"prompt", "size", "p", "seed"} rows: one random 3x3 lake each
    DIR/frozen_lake/test.jsonl    held-out lakes (other seeds)
    DIR/sft/frozen_lake.jsonl     multi-turn messages rows for the SFT warmup stage

The demo config plays ONE fixed lake, ``DEMO_LAKE`` (Trinity's ``workflow_args.desc``): the
3M-parameter model does not learn to read random maps in minutes on a CPU (after 80 warmup steps
on them it answered ```Left``` whatever the map), but it does learn a way across one lake from
the lake's reward. The warmup episodes are random walks on that lake that never step into a hole
or off it: they teach the answer format (```Right```) and no way to the goal; such a walk reaches
G within ``MAX_STEPS`` moves 13% of the time, the shortest way (Right Right Down Down, or Down
Down Right Right) always. The random lakes in the taskset serve configs without ``desc``.
"""

from __future__ import annotations

import random

from rft_core.workflows.frozen_lake import MOVES, FrozenLake

SYSTEM_PROMPT = "Reach G, avoid O."  # the warmup teaches the ```Down``` answers
SIZE, FROZEN, MAX_STEPS = 3, 0.8, 4
TRAIN_SIZE, TEST_SIZE, SFT_EPISODES = 2000, 100, 2000
DEMO_LAKE = ["SFF", "FHF", "FFG"]
ACTION_NAMES = {1: "Left", 2: "Down", 3: "Right", 4: "Up"}


def lake_seeds(seed: int) -> tuple[list[int], list[int]]:
    """Disjoint (train, test) map seeds drawn with ``seed``."""
    drawn = random.Random(seed).sample(range(10**6), TRAIN_SIZE + TEST_SIZE)
    return drawn[:TRAIN_SIZE], drawn[TRAIN_SIZE:]


def taskset_rows(seeds: list[int]) -> list[dict]:
    return [{"prompt": f"frozen lake {s}", "size": SIZE, "p": FROZEN, "seed": s} for s in seeds]


def safe_move(board: list[str], position: tuple[int, int], rng: random.Random) -> int:
    """A random move (1-4) that stays on the lake and out of its holes."""
    size = len(board)
    safe = [
        action
        for action, (dr, dc) in MOVES.items()
        if 0 <= position[0] + dr < size
        and 0 <= position[1] + dc < size
        and board[position[0] + dr][position[1] + dc] != "H"
    ]
    return rng.choice(safe)


def sft_rows(seed: int, board: list[str] = DEMO_LAKE) -> list[dict]:
    """``SFT_EPISODES`` random safe walks on ``board``, as the workflow renders them."""
    rng = random.Random(seed)
    rows = []
    for _ in range(SFT_EPISODES):
        env = FrozenLake(
            board,
            max_steps=MAX_STEPS,
            is_slippery=False,
            seed=0,
            system=SYSTEM_PROMPT,
            prompt_style="short",
        )
        messages = env.first_messages()
        while True:
            answer = f"```{ACTION_NAMES[safe_move(board, env.position, rng)]}```"
            messages.append({"role": "assistant", "content": answer})
            result = env.step(answer)
            if result.done:
                break
            messages.append({"role": "user", "content": result.observation})
        rows.append({"messages": messages})
    return rows
