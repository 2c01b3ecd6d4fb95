"""Readers of the actor weight layouts that ``trinity convert`` accepts, behind one lazy view.

Each reader maps an ``actor/`` directory to a :class:`LazyStateDict` in Hugging Face naming:
shapes and dtypes are known up front (to plan output files and check them against the model
architecture) and a tensor is only assembled when asked for, so conversion streams one output
file at a time. Detection order, first match wins:

1. ``fsdp``: ``model_world_size_W_rank_R.pt`` (ours, verl FSDP1/FSDP2) -> :mod:`.fsdp`
2. ``megatron``: ``mp_rank_XX[_YYY]/model_optim_rng.pt`` -> :mod:`.megatron`
3. ``safetensors``: a state-dict-only ``actor/model.safetensors`` (+ index) -> :mod:`.state_dict`
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from rft_core.checkpoint.formats.hf_safetensors import FileRange
from rft_core.errors import ConvertError


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype


class LazyStateDict(Mapping[str, Tensor]):
    """A read-only state dict whose tensors are produced on access by ``load(name)``.
    ``pieces(name)``, when given, yields tensors whose concatenated bytes are the tensor's
    (the writer streams them without assembling the tensor). ``dtype`` casts floating
    tensors on the way out."""

    def __init__(
        self,
        specs: dict[str, TensorSpec],
        load: Callable[[str], Tensor],
        *,
        format_name: str,
        dtype: torch.dtype | None = None,
        pieces: Callable[[str], Iterable[Tensor]] | None = None,
        file_ranges: Callable[[str], list[FileRange] | None] | None = None,
    ) -> None:
        self.specs = specs
        self._load = load
        self._pieces = pieces
        self._file_ranges = file_ranges
        self._buffer: Tensor | None = None
        self._staging: Tensor | None = None
        self.format_name = format_name
        self.dtype = dtype

    def _cast(self, t: Tensor) -> Tensor:
        if self.dtype is not None and t.is_floating_point() and t.dtype != self.dtype:
            return t.to(self.dtype)
        return t

    def __getitem__(self, name: str) -> Tensor:
        if name not in self.specs:
            raise KeyError(name)
        return self._cast(self._load(name))

    def pieces(self, name: str) -> Iterable[Tensor | FileRange]:
        """What the writer concatenates: file byte ranges when the bytes can be copied as they
        are (no cast), else tensors."""
        ranges = self._file_ranges(name) if self._file_ranges is not None else None
        if ranges is not None:
            if self.out_dtype(name) == self.specs[name].dtype:
                return ranges
            return self._cast_into_buffer(self._read_ranges(ranges, self.specs[name].dtype))
        if self._pieces is None:
            return [self[name]]
        return self._cast_into_buffer(self._pieces(name))

    def _read_ranges(self, ranges: list[FileRange], dtype: torch.dtype) -> Iterator[Tensor]:
        """Each range read into one reused staging buffer, as a flat tensor of ``dtype``."""
        for r in ranges:
            if self._staging is None or self._staging.numel() < r.nbytes:
                self._staging = torch.empty(r.nbytes, dtype=torch.uint8)
            raw = self._staging[: r.nbytes]
            r.read_into(memoryview(raw.numpy()))
            yield raw.view(dtype)

    def _cast_into_buffer(self, pieces: Iterable[Tensor]) -> Iterator[Tensor]:
        """Cast through one reused buffer: allocating a fresh tensor per piece costs more in
        page faults than the conversion itself. Each piece is valid until the next is made."""
        for t in pieces:
            if self.dtype is None or not t.is_floating_point() or t.dtype == self.dtype:
                yield t
                continue
            if self._buffer is None or self._buffer.numel() < t.numel():
                self._buffer = torch.empty(t.numel(), dtype=self.dtype)
            out = self._buffer[: t.numel()].view(t.shape)
            out.copy_(t)
            yield out

    def out_spec(self, name: str) -> tuple[tuple[int, ...], torch.dtype]:
        return self.specs[name].shape, self.out_dtype(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    def out_dtype(self, name: str) -> torch.dtype:
        spec = self.specs[name]
        return self.dtype if self.dtype is not None and spec.dtype.is_floating_point else spec.dtype

    def _replace(self, specs: dict[str, TensorSpec], dtype: torch.dtype | None) -> LazyStateDict:
        return LazyStateDict(
            specs,
            self._load,
            format_name=self.format_name,
            dtype=dtype,
            pieces=self._pieces,
            file_ranges=self._file_ranges,
        )

    def with_dtype(self, dtype: torch.dtype | None) -> LazyStateDict:
        return self._replace(self.specs, dtype)

    def without(self, names: set[str]) -> LazyStateDict:
        return self._replace({k: v for k, v in self.specs.items() if k not in names}, self.dtype)


def detect_format(actor_dir: Path) -> str | None:
    """``fsdp``, ``megatron``, ``safetensors``, or None when no supported weights are there."""
    from rft_core.checkpoint.formats import fsdp, megatron, state_dict

    for name, module in (("fsdp", fsdp), ("megatron", megatron), ("safetensors", state_dict)):
        if module.matches(actor_dir):
            return name
    return None


def open_actor_weights(actor_dir: Path, hf_config: Any) -> LazyStateDict:
    """The actor's weights in Hugging Face naming, whatever layout they were saved in."""
    from rft_core.checkpoint.formats import fsdp, megatron, state_dict

    actor_dir = Path(actor_dir)
    fmt = detect_format(actor_dir)
    if fmt == "fsdp":
        return fsdp.open_weights(actor_dir)
    if fmt == "megatron":
        return megatron.open_weights(actor_dir, hf_config)
    if fmt == "safetensors":
        return state_dict.open_weights(actor_dir)
    hint = ""
    if (actor_dir / "dist_ckpt").is_dir():
        hint = (
            " It holds a Megatron torch_dist checkpoint (dist_ckpt/), which this converter does "
            "not read; save with the legacy per-rank layout (mp_rank_XX/model_optim_rng.pt)."
        )
    raise ConvertError(
        f"no model weights found in {actor_dir}: expected model_world_size_W_rank_R.pt shards, "
        f"Megatron mp_rank_XX/ directories or a model.safetensors state dict.{hint}"
    )


def check_against_architecture(weights: LazyStateDict, hf_config: Any, where: Path) -> None:
    """Compare names and shapes with the model that ``hf_config`` describes (built on the meta
    device: no memory, no time). Raises ConvertError listing what does not match. Models
    transformers cannot build from the config alone are not checked."""
    from transformers import AutoModelForCausalLM

    try:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_config)
    except Exception:  # remote-code or non-causal-LM architectures: nothing to compare with
        return
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    if getattr(hf_config, "tie_word_embeddings", False):
        expected.pop("lm_head.weight", None)
    got = {k: s.shape for k, s in weights.specs.items()}
    if getattr(hf_config, "tie_word_embeddings", False):
        got.pop("lm_head.weight", None)
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    problems = []
    if missing:
        problems.append(f"missing {_few(missing)}")
    if unexpected:
        problems.append(f"unexpected {_few(unexpected)}")
    if wrong:
        problems.append(
            "shape mismatch "
            + ", ".join(f"{k} {list(got[k])} vs config {list(expected[k])}" for k in wrong[:3])
        )
    if problems:
        raise ConvertError(
            f"weights in {where} ({weights.format_name}) do not match the architecture in "
            f"config.json ({getattr(hf_config, 'model_type', '?')}): "
            + "; ".join(problems)
            + ". Is --base-model-dir the model this run started from?"
        )


def _few(names: list[str]) -> str:
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return ", ".join(names[:3]) + more
