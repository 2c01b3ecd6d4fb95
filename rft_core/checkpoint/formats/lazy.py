"""The lazy view every weight-layout reader returns: :class:`LazyStateDict` (Hugging Face names
-> :class:`TensorSpec`, a tensor assembled only when asked for). Its own module so that the
readers (``fsdp``, ``megatron``, ``state_dict``) and the package that picks one import it
without importing each other."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import Tensor

from rft_core.checkpoint.formats.hf_safetensors import FileRange


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
