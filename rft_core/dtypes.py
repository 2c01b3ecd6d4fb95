"""The dtype names of the project, in one table: the weight dtypes a config, the CLI or an HF
``config.json`` may name, their aliases (``bf16`` -> ``bfloat16``), and the safetensors header
codes. Torch-free so the config, the CLI and the web process can read it; ``torch_dtype``
imports torch only when called.

Canonical names are torch's own (``torch.bfloat16`` is ``"bfloat16"``). ``"auto"`` is no
dtype: each caller resolves it (trainer and rollout: bfloat16 on CUDA, float32 on CPU;
``trinity convert``: the dtype in config.json)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rft_core.errors import RFTError

if TYPE_CHECKING:
    import torch

AUTO = "auto"
# the floating dtypes weights are trained, sampled and written in
WEIGHT_DTYPES = ("bfloat16", "float16", "float32")
# the short spellings: config aliases and the ``trinity convert --dtype`` choices
SHORT_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# every other spelling accepted for a weight dtype (HF config.json says "half", "float")
ALIASES = {**SHORT_ALIASES, "float": "float32", "half": "float16"}
# torch dtype name -> the dtype code of a safetensors header
SAFETENSORS_CODES = {
    "float64": "F64",
    "float32": "F32",
    "float16": "F16",
    "bfloat16": "BF16",
    "int64": "I64",
    "int32": "I32",
    "int16": "I16",
    "int8": "I8",
    "uint8": "U8",
    "bool": "BOOL",
}


def names() -> list[str]:
    """Every accepted spelling of a weight dtype, sorted (canonical names and aliases)."""
    return sorted({*WEIGHT_DTYPES, *ALIASES})


def canonical(name: str) -> str:
    """The canonical name of a weight dtype (``"BF16"`` -> ``"bfloat16"``); case-insensitive.
    Raises RFTError listing the accepted names ("auto" included: every dtype option takes it)."""
    key = str(name).lower()
    if key in WEIGHT_DTYPES:
        return key
    try:
        return ALIASES[key]
    except KeyError:
        raise RFTError(
            f"dtype {name!r} is not supported; use one of {AUTO}, {', '.join(names())}"
        ) from None


def torch_dtype(name: str) -> torch.dtype:
    """The ``torch.dtype`` of a weight dtype name or alias (see :func:`canonical`)."""
    # torch-free slice: the config schema imports this module
    import torch

    return getattr(torch, canonical(name))


def from_safetensors_code(code: str) -> str:
    """The torch dtype name of a safetensors header code (``"BF16"`` -> ``"bfloat16"``)."""
    return _NAMES_BY_CODE[code]


_NAMES_BY_CODE = {code: name for name, code in SAFETENSORS_CODES.items()}
