"""Micro-batches by a token budget (``trainer.max_token_len_per_gpu``) and the packed
(padding-free) layout of ``rft_core.trainer.batching``, with numbers worked by hand."""

from __future__ import annotations

import torch

from rft_core.trainer.batching import collate, micro_batches


def test_a_token_budget_counts_padded_tokens_or_packed_ones():
    lengths = [10, 9, 5, 4, 3]
    # padded, budget 24: [10, 9] pads to 2 x 10 = 20 (a third row: 30 > 24); [5, 4, 3] to 15
    assert micro_batches(lengths, None, 24) == [[0, 1], [2, 3, 4]]
    # packed: 10 + 9 + 5 = 24 fits; then 4 + 3 = 7
    assert micro_batches(lengths, None, 24, packed=True) == [[0, 1, 2], [3, 4]]
    # the row cap still applies; a row longer than the budget runs alone
    assert micro_batches(lengths, 2, 100, packed=True) == [[0, 1], [2, 3], [4]]
    assert micro_batches([30, 2, 2], None, 8) == [[0], [1, 2]]
    # no budget: only the row cap
    assert micro_batches(lengths, None) == [[0, 1, 2, 3, 4]]


def test_packed_rows_restart_positions_and_scatter_into_the_right_aligned_layout():
    sequences = [([1, 2, 3], [4, 5], [1, 1]), ([6], [7, 8, 9], [1, 1, 1])]
    mb = collate(sequences, [0, 1], pad_token_id=0, device=torch.device("cpu"), pack=True)
    packed = mb.packed
    assert packed.input_ids.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert packed.position_ids.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    # row 0's response 4, 5 is predicted from positions 2, 3; row 1's 7, 8, 9 from 5, 6, 7
    assert packed.logits_index.tolist() == [2, 3, 5, 6, 7]
    assert packed.targets.tolist() == [[4, 5, 7, 8, 9]]
    # right-aligned in width 3: row 0 takes columns 1, 2 (slots 1, 2); row 1 slots 3, 4, 5
    assert packed.slot.tolist() == [1, 2, 3, 4, 5]
    assert mb.targets.flatten()[packed.slot].tolist() == [4, 5, 7, 8, 9]
    assert collate(sequences, [0, 1], 0, torch.device("cpu")).packed is None
