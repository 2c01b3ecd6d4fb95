"""The collectives that keep sharded trainer ranks in step inside one optimizer step.

Every rank of a ``TrainerRanks`` (``rft_core.trainer.ranks``) runs the same ``PolicyUpdater``
code on its shard of the batch. Global means need the global token and row counts
(``sum_across_ranks``), FSDP2 needs every rank to make the same number of forward calls
(``StepRanks.in_step``: the micro-batch count of the busiest rank), and token-level advantages
whiten over every rank's tokens (``sum_tensor_across_ranks``). At world size 1 each is the
identity, so the one-process trainer runs the same code without a process group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from rft_core.trainer.batching import split_to_count


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _reduce(values: Sequence[float], op: Any, device: torch.device) -> list[float]:
    if not _distributed():
        return list(values)
    on = device if dist.get_backend() == "nccl" else torch.device("cpu")
    t = torch.tensor(list(values), dtype=torch.float64, device=on)
    dist.all_reduce(t, op=op)
    return t.tolist()


def sum_across_ranks(values: Sequence[float], device: torch.device) -> list[float]:
    """Element-wise sums over the trainer ranks (the values themselves at world size 1)."""
    return _reduce(values, dist.ReduceOp.SUM, device)


def max_across_ranks(values: Sequence[float], device: torch.device) -> list[float]:
    return _reduce(values, dist.ReduceOp.MAX, device)


def sum_tensor_across_ranks(t: torch.Tensor) -> torch.Tensor:
    """``t`` summed over the ranks (a new tensor; ``t`` itself at world size 1), for the
    batch statistics of token-level advantages (``masked_whiten``)."""
    if not _distributed():
        return t
    out = t.detach().clone()
    if dist.get_backend() != "nccl":
        out = out.cpu()
    dist.all_reduce(out)
    return out.to(t.device)


@dataclass
class StepRanks:
    """This process's place among the trainer ranks: ``world_size`` 1 is a process on its own,
    and then every method below is the identity."""

    world_size: int
    rank: int
    device: torch.device

    @classmethod
    def of_process(cls, device: torch.device) -> StepRanks:
        """The default process group's size and this process's rank in it (1 and 0 without)."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_world_size(), dist.get_rank(), device)
        return cls(1, 0, device)

    @property
    def sharded(self) -> bool:
        return self.world_size > 1

    def total(self, *values: float) -> list[float]:
        """Sums over the ranks: the denominators of global means (the values at one rank)."""
        return sum_across_ranks(values, self.device) if self.sharded else list(values)

    def largest(self, value: float) -> float:
        """The largest of the ranks' ``value`` (``value`` itself at one rank)."""
        return max_across_ranks([value], self.device)[0] if self.sharded else value

    def in_step(self, groups: list[list[int]]) -> tuple[list[list[int]], int]:
        """Micro-batch row groups split so that every rank has as many as the busiest one, and
        the padding micro-batches still missing (a rank with too few rows)."""
        if not self.sharded:
            return groups, 0
        return split_to_count(groups, int(self.largest(len(groups))))
