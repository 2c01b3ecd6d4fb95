"""The short runs of the algorithm tests (``runtime/test_algorithm_runs*.py``): two steps of the
tiny demo model with explorer and trainer in one process (``mode: colocate``), each response
scored by its length in characters. The untrained demo model never earns the math reward in 6
tokens (every reward -0.1, every group advantage 0); random samples differ in length, so the
groups have something to compare. Importing this module registers that ``response_chars``
reward."""

from __future__ import annotations

from pathlib import Path

from run_configs import run_config

from rft_core import rewards

if "response_chars" not in rewards.names():

    @rewards.register("response_chars")
    def response_chars(response: str, truth: str) -> dict[str, float]:
        return {"response_chars": len(response) / 32}


def colocated_run_config(demo, root: Path, algorithm: dict) -> dict:
    """``run_config`` of ``algorithm`` for two steps in mode colocate (memory sync every step),
    scored by ``response_chars``; named after the algorithm type."""
    cfg = run_config(
        demo,
        root,
        algorithm["algorithm_type"],
        algorithm=algorithm,
        buffer={"total_steps": 2},
        synchronizer={"sync_method": "memory", "sync_interval": 1, "sync_offset": 0},
    )
    cfg["mode"] = "colocate"
    cfg["buffer"]["explorer_input"]["taskset"]["default_reward_fn_type"] = "response_chars"
    return cfg
