"""What the tests of the ``vllm`` rollout engine share (``rollout/test_rollout_vllm.py``,
``rollout/test_vllm_rl.py``, whose ``conftest.py`` has the ``fake_vllm`` and ``model_dir``
fixtures): vLLM is mocked, as it cannot be installed on this machine (no GPU, no CUDA build), by
the fake package in ``fake_vllm/`` that the ``fake_vllm`` fixture puts on ``sys.path`` for one
test."""

from __future__ import annotations

from pathlib import Path

from rft_core.rollout import build_engine

FAKE_VLLM = Path(__file__).parent / "fake_vllm"
SEED = Path(__file__).parents[2] / "examples" / "grpo_gsm8k" / "gsm8k.yaml"


def vllm_engine(model_dir, **kwargs):
    """The ``vllm`` engine on ``model_dir`` (under the ``fake_vllm`` fixture: the fake vLLM)."""
    return build_engine("vllm", str(model_dir), **kwargs)
