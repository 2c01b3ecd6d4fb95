"""Loss aggregation modes (verl's agg_loss semantics) against hand-computed values."""

from __future__ import annotations

import pytest
import torch

from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.errors import ConfigError

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
MASK = torch.tensor([[1, 1, 0], [1, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # unmasked tokens 1, 2, 4: (1 + 2 + 4) / 3
        ("token-mean", 7 / 3),
        # row sums 3 and 4, mean over 2 rows
        ("seq-mean-token-sum", 3.5),
        # row means 1.5 and 4, mean over 2 rows
        ("seq-mean-token-mean", 2.75),
        # (3 + 4) / padded width 3
        ("seq-mean-token-sum-norm", 7 / 3),
    ],
)
def test_modes(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_sum_norm_with_fixed_horizon():
    # (3 + 4) / 10
    assert aggregate_loss(
        LOSS, MASK, "seq-mean-token-sum-norm", horizon=10
    ).item() == pytest.approx(0.7)


def test_fully_masked_row_counts_zero_not_nan():
    loss = torch.tensor([[1.0, 1.0], [5.0, 5.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    # row means 1 and 0 (empty row) -> 0.5
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == 0.5
    assert masked_mean(loss, torch.zeros_like(mask)).item() == 0.0


def test_masked_mean_along_dim():
    assert masked_mean(LOSS, MASK, dim=-1).tolist() == [1.5, 4.0]


def test_unknown_mode_names_the_yaml_path():
    with pytest.raises(ConfigError) as err:
        aggregate_loss(LOSS, MASK, "token-sum")
    assert err.value.path == "algorithm.loss_agg_mode"
    assert "seq-mean-token-mean" in str(err.value)
