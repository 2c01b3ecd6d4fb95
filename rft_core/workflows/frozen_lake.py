"""``frozen_lake_workflow``: Trinity-RFT's FrozenLake environment on ``gymnasium``.

A task row gives the lake: ``size`` (side of the square map), ``p`` (probability that a tile is
frozen rather than a hole) and ``seed``; ``workflow_args`` give ``is_slippery`` (False),
optionally ``desc`` (a fixed map, rows of S/F/H/G), and the two step bounds with Trinity's two
spellings: ``agent_max_steps`` (model turns per episode) and ``env_max_steps`` (the map's goal
is reachable in at most this many moves), as Trinity's current ``frozen_lake/workflow.py`` reads
them (defaults 10 and 8); the older ``max_steps`` (its earlier version) sets both (default 10,
also when none is given). The map is drawn as Trinity draws it: a ``gymnasium`` RNG seeded with
``seed`` fills the board with F/H, picks a start and a different goal, and draws again until the
goal is reachable from the start in at most ``env_max_steps`` moves.

Refused (they would change results and are not implemented): ``use_multistep_prompt: true``
(Trinity's few-shot prompt) and ``reward_fn_type`` / ``reward_fn_args`` (Trinity's newer version
scores the trajectory with that grader instead of the environment's reward); an outside judge
API named there is refused by name. ``max_model_len`` is taken and unused, as in Trinity.

Each turn the model sees the lake (``P`` player, ``_`` frozen, ``O`` hole, ``G`` goal, ``X``
player in a hole, ``√`` player on the goal; cells as `` P \\t``, one row per line) and answers
with its thinking and the action in triple backticks (```Up```, ```Down```, ```Left```,
```Right```, or 1-4 for Left/Down/Right/Up); the last backtick block counts. An answer without a
valid action leaves the player where it is, and the next observation says so. The episode ends
on the goal (reward 1), in a hole (reward 0), or after ``max_steps`` turns (reward 0). Metrics:
``success``, ``env_steps``, ``env_done``.

The taskset's ``format.system_prompt`` replaces the default system prompt, and
``workflow_args.prompt_style: short`` words each observation as the lake and the steps left only:
the tiny demo model reads one token per character.
"""

from __future__ import annotations

import logging
import re
from collections import deque
from typing import Any

from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv
from gymnasium.utils import seeding

from rft_core.data.task import Task
from rft_core.errors import ConfigError, DataError
from rft_core.workflows.base import register
from rft_core.workflows.multi_turn import Environment, MultiTurnWorkflow, StepResult

log = logging.getLogger(__name__)

SYSTEM_PROMPT = """You are a helpful assistant walking on a frozen lake.

FrozenLake Quick Guide
Goal: reach the goal (G): the player (P) must stand on G.

Symbols:
_ Frozen | O Hole | G Goal | P Player

Rules:
1. Do not fall into a hole (O).
2. Frozen tiles may be slippery: you may move perpendicular to the direction you chose.

Valid actions (separated by | ):
Up | Down | Left | Right

Rewards:
Fall into a hole: 0
Reach the goal: +1.0

You get the current observation; decide the next action. Show your thought process, then put
the final action in ``` ```, only the NEXT action, for example ```Up``` to move up. Plan ahead
and reach the goal in as few steps as you can; slipping is rare, do not overthink it.
In every turn the final action MUST be one of Up, Down, Left, Right.
"""

# our action numbers (Trinity's: 0 = no valid action) -> gymnasium's FrozenLake actions
DIRECTIONS = {"left": 1, "down": 2, "right": 3, "up": 4}
GYM_ACTION = {1: 0, 2: 1, 3: 2, 4: 3}
MOVES = {1: (0, -1), 2: (1, 0), 3: (0, 1), 4: (-1, 0)}
CELL = {"P": " P \t", "F": " _ \t", "S": " _ \t", "H": " O \t", "G": " G \t"}
PLAYER_IN = {"H": " X \t", "G": " √ \t"}
_ACTION_BLOCK = re.compile(r"```(.*?)```", re.DOTALL)


def parse_action(response: str) -> int:
    """1-4 (Left/Down/Right/Up) from the last ``` ``` block of ``response``; 0 when none."""
    blocks = _ACTION_BLOCK.findall(response)
    if not blocks:
        return 0
    text = blocks[-1].strip().lower()
    if text in DIRECTIONS:
        return DIRECTIONS[text]
    if text.isdigit() and int(text) in GYM_ACTION:
        return int(text)
    return 0


def shortest_path(
    board: list[str], max_steps: int | None = None, start: tuple[int, int] | None = None
) -> list[int] | None:
    """Actions (1-4) of a shortest walk from S (or ``start``) to G avoiding holes; None when
    there is none (or none within ``max_steps`` moves)."""
    size = len(board)
    if start is None:
        start = next((r, c) for r in range(size) for c in range(size) if board[r][c] == "S")
    previous: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if board[cell[0]][cell[1]] == "G":
            path = []
            while previous[cell] is not None:
                cell, action = previous[cell]  # type: ignore[misc]
                path.append(action)
            path.reverse()
            return path if max_steps is None or len(path) <= max_steps else None
        for action, (dr, dc) in MOVES.items():
            r, c = cell[0] + dr, cell[1] + dc
            if 0 <= r < size and 0 <= c < size and (r, c) not in previous and board[r][c] != "H":
                previous[(r, c)] = (cell, action)
                queue.append((r, c))
    return None


def random_map(size: int, p: float, seed: int, max_steps: int) -> list[str]:
    """A ``size`` x ``size`` map (rows of S/F/H/G) whose goal is reachable within
    ``max_steps`` moves, drawn from a gymnasium RNG seeded with ``seed``."""
    if size < 2:
        raise DataError(f"frozen_lake: size must be >= 2 (a start and a goal), got {size}")
    rng, _ = seeding.np_random(seed)
    p = min(1.0, p)
    while True:
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p]).tolist()
        while True:
            start = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            goal = (int(rng.integers(0, size)), int(rng.integers(0, size)))
            if start != goal:
                break
        board[start[0]][start[1]] = "S"
        board[goal[0]][goal[1]] = "G"
        rows = ["".join(row) for row in board]
        if shortest_path(rows, max_steps) is not None:
            return rows


PROMPT_STYLES = ("trinity", "short")


class FrozenLake(Environment):
    """One episode on one map (``gymnasium``'s ``FrozenLakeEnv``). ``prompt_style`` "trinity"
    words each observation as Trinity does; "short" gives the lake and the steps left only
    (for a small context: the tiny demo model reads one token per character)."""

    def __init__(
        self,
        board: list[str],
        *,
        max_steps: int,
        is_slippery: bool,
        seed: int,
        system: str,
        prompt_style: str = "trinity",
    ):
        self.board = board
        self.max_steps = max_steps
        self.system = system
        self.prompt_style = prompt_style
        self.gym = FrozenLakeEnv(desc=board, is_slippery=is_slippery)
        self.gym.reset(seed=seed)  # slipping is drawn from this seed: episodes replay
        self.steps = 0
        self.reward = 0.0
        self.done = False
        self.last_observation: str | None = None

    @property
    def position(self) -> tuple[int, int]:
        return divmod(int(self.gym.s), len(self.board[0]))

    def render(self) -> str:
        row_p, col_p = self.position
        lines = []
        for r, row in enumerate(self.board):
            cells = []
            for c, tile in enumerate(row):
                if (r, c) == (row_p, col_p):
                    cells.append(PLAYER_IN.get(tile, CELL["P"]))
                else:
                    cells.append(CELL[tile])
            lines.append("".join(cells))
        return "\n".join(lines)

    def observation(self) -> str:
        current = self.render()
        remaining = self.max_steps - self.steps
        if self.prompt_style == "short":
            invalid = self.steps > 0 and current == self.last_observation
            return current + ("\nInvalid move." if invalid else "") + f"\n{remaining} steps left."
        text = (
            f"Current Observation ({self.steps}): \n{current}\n"
            "You have not achieved the goal, P has not reached G yet. Please give the next action."
        )
        if self.steps > 0 and current == self.last_observation:
            text += (
                "\nYour last response is invalid. Your position didn't change at all. You may "
                "need to recheck your thinking process, action outputted, and the format of "
                "response. Remember, you should only output the NEXT ACTION at each interation "
                "in the ``` ```. For example, if you want to move up, you should output ```Up```."
            )
        if remaining > 0:
            text += f"\nThe maximum number of steps remaining is {remaining}."
        return text

    def first_messages(self) -> list[dict[str, str]]:
        self.last_observation = None
        return [
            {"role": "system", "content": self.system},
            {"role": "user", "content": self.observation()},
        ]

    def step(self, response: str) -> StepResult:
        self.last_observation = self.render()
        action = parse_action(response)
        if action:
            _, reward, terminated, _, _ = self.gym.step(GYM_ACTION[action])
            self.reward, self.done = float(reward), bool(terminated)
        self.steps += 1
        if self.done or self.steps >= self.max_steps:
            return StepResult(None, self.reward, True)
        return StepResult(self.observation(), self.reward, False)

    def state_key(self) -> str:
        """The lake and where the player stands on it (GiGPO's anchor state)."""
        row, col = self.position
        return f"{'/'.join(self.board)}@{row},{col}"

    def metrics(self) -> dict[str, float]:
        return {
            "success": float(self.reward == 1.0),
            "env_steps": float(self.steps),
            "env_done": float(self.done),
        }


@register("frozen_lake_workflow")
class FrozenLakeWorkflow(MultiTurnWorkflow):
    takes_args = (
        "max_steps",
        "env_max_steps",
        "agent_max_steps",
        "is_slippery",
        "desc",
        "prompt_style",
        "max_model_len",
    )
    refused_args = {
        "use_multistep_prompt": "Trinity's few-shot FrozenLake prompt is not implemented here; "
        "remove it (or set it false) to use the plain system prompt",
        "reward_fn_type": "frozen_lake_workflow rewards an episode with the environment's reward; "
        "a trajectory grader is not applied here; remove it",
        "reward_fn_args": "arguments of workflow_args.reward_fn_type, which is not applied here; "
        "remove it",
    }

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        for key, why in self.refused_args.items():
            if self.args.get(key) not in (None, False):
                raise ConfigError(f"buffer.explorer_input.taskset.workflow_args.{key}", why)

    @property
    def max_steps(self) -> int:
        """Model turns per episode: ``agent_max_steps``, else ``max_steps``, else 10."""
        return int(self.args.get("agent_max_steps", self.args.get("max_steps", 10)))

    @property
    def env_max_steps(self) -> int:
        """The map's goal is reachable in at most this many moves: ``env_max_steps``; else
        ``max_steps``; else 8 when ``agent_max_steps`` is given (Trinity's current default),
        10 otherwise (its earlier one)."""
        if "env_max_steps" in self.args:
            return int(self.args["env_max_steps"])
        if "max_steps" in self.args:
            return int(self.args["max_steps"])
        return 8 if "agent_max_steps" in self.args else 10

    @property
    def prompt_style(self) -> str:
        style = str(self.args.get("prompt_style", "trinity"))
        if style not in PROMPT_STYLES:
            raise ConfigError(
                "buffer.explorer_input.taskset.workflow_args.prompt_style",
                f"unknown prompt style {style!r}; one of: {', '.join(PROMPT_STYLES)}",
                value=style,
                allowed=list(PROMPT_STYLES),
            )
        return style

    def board(self, task: Task) -> list[str]:
        if self.args.get("desc"):
            return [str(row) for row in self.args["desc"]]
        raw = task.raw
        return random_map(
            int(raw.get("size", 4)),
            float(raw.get("p", 0.8)),
            int(raw.get("seed", 42)),
            self.env_max_steps,
        )

    def environment(self, task: Task, run: int) -> Environment:
        return FrozenLake(
            self.board(task),
            max_steps=self.max_steps,
            is_slippery=bool(self.args.get("is_slippery", False)),
            seed=int(task.raw.get("seed", 42)) * 1000 + run,
            system=task.system_prompt or SYSTEM_PROMPT,
            prompt_style=self.prompt_style,
        )
