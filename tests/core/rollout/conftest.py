"""Fixtures of the rollout engines' tests: the fake vLLM (``vllm_fakes``) and the tiny model its
workers hold."""

from __future__ import annotations

import sys

import pytest
from tiny_lm import build_tiny_model
from vllm_fakes import FAKE_VLLM


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture()
def fake_vllm(monkeypatch):
    """Make ``import vllm`` find the fake package for one test, then forget it."""
    monkeypatch.syspath_prepend(str(FAKE_VLLM))
    # the adapter may set VLLM_USE_FLASHINFER_SAMPLER; set-then-delete makes monkeypatch restore
    # the variable as it was before the test
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "")
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    yield
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]
