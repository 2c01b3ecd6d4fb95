"""tests/core is laid out like rft_core (``config/``, ``trainer/``, ``runtime/``, ...; the tests
of rft_core's top-level modules stay here). The helper modules the folders share (``tiny_lm``,
``checkpoint_fixtures``, ``convert_fixtures``, ``run_configs``, ``algorithm_runs``,
``policy_rollouts``, ``workflow_engines``, ``frozen_lake_play``, ``ray_cluster``,
``in_process_script``, ``vllm_fakes``, ``trinity_corpus``, ``toolace``, ``fake_pynvml``) and the data beside them (``fake_vllm/``, ``trinity_configs/``,
``broken_configs/``) stay in this folder too: it is put on ``sys.path`` here, so
``from tiny_lm import build_tiny_model`` works from any subfolder. The fixtures the runs of
several folders share (the demo, a local Ray) are here too."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

CORE_TESTS = str(Path(__file__).resolve().parent)
if CORE_TESTS not in sys.path:
    sys.path.insert(0, CORE_TESTS)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo's tiny model and datasets (``build_demo``), built once per test module."""
    from rft_core.demo import build_demo

    return build_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray of 2 CPUs for one test module's runs, shut down after it."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield
    ray.shutdown()
