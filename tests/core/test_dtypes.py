"""The one dtype table (rft_core/dtypes.py): names and aliases resolve to torch's dtypes, and an
unknown name is an error listing the accepted ones. That reading it imports no torch is checked
where the config is (test_registered_names.py, tests/webapp/experiments/test_config_policy.py: the schema
imports it)."""

from __future__ import annotations

import pytest
import torch

from rft_core import dtypes
from rft_core.errors import RFTError


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("bf16", torch.bfloat16),
        ("BFloat16", torch.bfloat16),
        ("fp16", torch.float16),
        ("half", torch.float16),
        ("fp32", torch.float32),
        ("float", torch.float32),
        ("float32", torch.float32),
    ],
)
def test_names_and_aliases_resolve_to_torch_dtypes(name, expected):
    assert dtypes.torch_dtype(name) is expected
    assert dtypes.canonical(name) == str(expected).removeprefix("torch.")


def test_an_unknown_dtype_lists_the_accepted_names():
    with pytest.raises(RFTError) as err:
        dtypes.canonical("int8")
    assert str(err.value) == (
        "dtype 'int8' is not supported; use one of auto, bf16, bfloat16, float, float16, "
        "float32, fp16, fp32, half"
    )


def test_safetensors_codes_are_torch_dtype_names_both_ways():
    for name, code in dtypes.SAFETENSORS_CODES.items():
        assert isinstance(getattr(torch, name), torch.dtype)
        assert dtypes.from_safetensors_code(code) == name
