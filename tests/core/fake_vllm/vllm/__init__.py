"""Fake vLLM (public API of vLLM 0.10.2 - 0.11.x); see ../README.md. Test use only."""

from vllm.entrypoints.llm import LLM
from vllm.sampling_params import SamplingParams

__version__ = "0.11.0"

__all__ = ["LLM", "SamplingParams", "__version__"]
