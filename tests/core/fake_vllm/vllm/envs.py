"""``vllm.envs``: the environment variables this project reads, evaluated when read (as vLLM's
module ``__getattr__`` does)."""

import os


def _flag(name: str, default: str) -> bool:
    return os.environ.get(name, default).strip().lower() not in ("0", "false", "")


def __getattr__(name: str) -> object:
    if name == "VLLM_ENABLE_V1_MULTIPROCESSING":
        return _flag(name, "1")
    if name == "VLLM_ALLOW_INSECURE_SERIALIZATION":
        return _flag(name, "0")
    raise AttributeError(name)
