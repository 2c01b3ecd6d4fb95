"""Fake vLLM (public API of vLLM 0.26.0); see ../README.md. Test use only.

``__version__`` is 0.26.0 unless ``FAKE_VLLM_VERSION`` says otherwise (the version check's
tests)."""

import os

from vllm import envs
from vllm.entrypoints.llm import LLM
from vllm.sampling_params import SamplingParams

__version__ = os.environ.get("FAKE_VLLM_VERSION", "0.26.0")

__all__ = ["LLM", "SamplingParams", "__version__", "envs"]
