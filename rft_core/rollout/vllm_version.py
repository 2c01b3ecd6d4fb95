"""Which vLLM versions the ``vllm`` rollout engine is tested with, and the one-line check.

``rft_core/rollout/vllm.py`` targets vLLM's V1 engine as of 0.26.0 (the version run on the lent
H200, issue 21); the range below is what ``pyproject.toml``'s ``vllm`` extra pins. A vLLM outside
it, or none, is a ``ConfigError`` on ``explorer.rollout_model.engine_type``: the launcher's
preflight raises it before any actor starts (CLI exit 2), and the engine factory raises it
again inside an actor where the driver could not see the nodes' vLLM (a Ray cluster).
"""

from __future__ import annotations

import importlib
import re

from rft_core.errors import ConfigError

KEY = "explorer.rollout_model.engine_type"
TESTED_MIN = (0, 26, 0)  # inclusive
TESTED_BELOW = (0, 27, 0)  # exclusive
TESTED_RANGE = ">=0.26.0,<0.27"  # the same range, as pyproject's vllm extra writes it


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``"0.26.0"``, ``"0.26.1rc1"``, ``"0.26.0+cu129"`` -> ``(0, 26, 0|1)``; None when the
    string does not start with three dotted numbers (two are read as ``x.y.0``)."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def vllm_version_problem(version: str | None) -> str | None:
    """What is wrong with vLLM ``version`` (None: not installed), or None when it is tested."""
    fix = f"install a tested one (pip install 'rft-studio[vllm]', vllm{TESTED_RANGE}) or set {KEY}: hf"
    if version is None:
        return f"vllm is selected but vLLM is not installed; {fix}"
    parsed = parse_version(version)
    if parsed is None or not TESTED_MIN <= parsed < TESTED_BELOW:
        return f"vLLM {version} is outside the tested range {TESTED_RANGE}; {fix}"
    return None


def installed_vllm_version() -> str | None:
    """``vllm.__version__`` of the importable vLLM, None when it cannot be imported."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError:
        return None
    return str(getattr(vllm, "__version__", "unknown"))


def check_vllm_version(version: str | None = ...) -> str:  # type: ignore[assignment]
    """Raise ``ConfigError`` (key ``explorer.rollout_model.engine_type``) unless vLLM is
    installed at a tested version; returns the version. ``version`` defaults to the installed
    one (pass a string to check another)."""
    if version is ...:
        version = installed_vllm_version()
    problem = vllm_version_problem(version)
    if problem is not None:
        raise ConfigError(KEY, problem, value="vllm", allowed=["hf"])
    return str(version)


__all__ = ["TESTED_RANGE", "check_vllm_version", "parse_version", "vllm_version_problem"]
