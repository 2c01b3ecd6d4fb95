"""The local Ray the run tests start (``local_ray`` in conftest.py), as they read it back."""

from __future__ import annotations

import time

import ray


def cpus_back(cpus: float, wait_s: float = 30.0) -> bool:
    """Whether Ray's free CPUs return to ``cpus`` (its resource view lags a removal a moment)."""
    deadline = time.monotonic() + wait_s
    while ray.available_resources().get("CPU") != cpus:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
