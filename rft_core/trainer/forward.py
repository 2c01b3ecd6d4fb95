"""The trainer's forwards: a step's experiences cut into micro-batches, and the log-probs of
their response tokens under a model.

Log-probs are ``log_softmax(logits / temperature)`` in fp32, the rollout engines' convention
(``rft_core.modeling.token_logprobs``), so that an on-policy importance ratio is 1 up to
numerics; they and the entropies come from the LM head a chunk of tokens at a time
(``rft_core.trainer.token_head``), never as whole ``[tokens x vocab]`` logits. Only the
positions predicting the response tokens reach the head (``logits_to_keep``, see
``rft_core.trainer.batching`` for the padding layout); when prompts repeat in a micro-batch each
distinct prompt runs once and its KV cache serves every response to it (``SharedPrefix``).
"""

from __future__ import annotations

from typing import Any

import torch

from rft_core.experience import Experience
from rft_core.modeling import cpu_attention, full_attention_cache
from rft_core.trainer.batching import (
    MicroBatch,
    SharedPrefix,
    collate,
    micro_batches,
    padding_micro_batch,
    response_mask,
)
from rft_core.trainer.collectives import StepRanks
from rft_core.trainer.token_head import DEFAULT_CHUNK_TOKENS, token_head


class PolicyForward:
    """Micro-batches and forwards of one trainer process (one rank of several, or alone)."""

    def __init__(
        self,
        *,
        ranks: StepRanks,
        autocast_dtype: torch.dtype | None,
        temperature: float,
        pad_token_id: int,
        micro_batch_size: int | None,
        max_token_len: int | None,
        share_prompt_prefix: bool,
        chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
    ) -> None:
        self.ranks = ranks
        self.device = ranks.device
        self.autocast_dtype = autocast_dtype
        self.temperature = temperature
        self.pad_token_id = pad_token_id
        self.micro_batch_size = micro_batch_size
        self.max_token_len = max_token_len
        self.chunk_tokens = chunk_tokens  # tokens per chunk of the LM head's outputs
        # run a prompt shared by several rows once (batching.SharedPrefix); off: the plain
        # layout. Sharded ranks keep the plain layout: one forward per micro-batch on every rank
        self.share_prompt_prefix = share_prompt_prefix and not ranks.sharded

    def micro_batches(self, experiences: list[Experience]) -> list[MicroBatch]:
        """The step's micro-batches, as many on every rank (padding ones where rows run out)."""
        seqs = [(e.prompt_ids, e.response_ids, response_mask(e)) for e in experiences]
        lengths = [len(p) + len(r) for p, r, _ in seqs]
        groups, padding = self.ranks.in_step(
            micro_batches(lengths, self.micro_batch_size, self.max_token_len)
        )
        mbs = [collate([seqs[i] for i in g], g, self.pad_token_id, self.device) for g in groups]
        return mbs + [padding_micro_batch(mbs[0]) for _ in range(padding)]

    def logprobs(
        self, model: Any, mb: MicroBatch, *, entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, R] log-probs of the response tokens, and (``entropy``) the [B, R] entropies of
        the distributions they were drawn from; the logits are never held whole
        (``rft_core.trainer.token_head``)."""
        outputs = self.token_outputs(model, mb, entropy)
        return outputs[..., 0], outputs[..., 1] if entropy else None

    @torch.no_grad()
    def logprobs_of(self, model: Any, experiences: list[Experience]) -> list[list[float]]:
        """Each experience's response-token log-probs under ``model``."""
        model.eval()
        out: list[list[float]] = [[] for _ in experiences]
        for mb in self.micro_batches(experiences):
            logp, _ = self.logprobs(model, mb)
            if mb.padding:
                continue
            for b, row in enumerate(mb.rows):
                n = len(experiences[row].response_ids)
                out[row] = logp[b, mb.response_width - n :].tolist() if n else []
        return out

    def token_outputs(self, model: Any, mb: MicroBatch, entropy: bool = True) -> torch.Tensor:
        """[B, R, 2]: each response token's log-prob and the entropy at its position ([B, R,
        1]: the log-probs alone, without ``entropy``)."""
        with (
            torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype or torch.bfloat16,
                enabled=self.autocast_dtype is not None,
            ),
            cpu_attention(model),
            token_head(model, self.temperature, self.chunk_tokens) as set_targets,
        ):
            prefix = mb.shared_prefix
            if prefix is not None and self.share_prompt_prefix and shares_prefix(model):
                return self._shared_prefix_outputs(model, prefix, mb, set_targets, entropy)
            set_targets(mb.targets, entropy)
            out = model(
                input_ids=mb.input_ids,
                attention_mask=mb.attention_mask,
                position_ids=mb.position_ids,
                use_cache=False,
                logits_to_keep=mb.response_width + 1,
            )
        return out.logits

    def _shared_prefix_outputs(
        self, model: Any, prefix: SharedPrefix, mb: MicroBatch, set_targets: Any, entropy: bool
    ) -> torch.Tensor:
        """``token_outputs`` on the shared-prefix layout: each distinct prompt runs once; its
        KV cache (not detached: every row's gradient flows back into it) is expanded to the rows
        of each response block, which run on top of it."""
        from transformers import DynamicCache

        width = mb.response_width
        cache = DynamicCache(config=model.config)
        set_targets(None)
        model(
            input_ids=prefix.input_ids,
            attention_mask=prefix.attention_mask,
            position_ids=prefix.position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        parts = []
        for block in prefix.blocks:
            if len(prefix.blocks) == 1:
                block_cache = cache
                block_cache.batch_select_indices(block.prefix_of_row)
            else:
                block_cache = DynamicCache(config=model.config)
                for source, target in zip(cache.layers, block_cache.layers, strict=True):
                    index = block.prefix_of_row
                    target.update(source.keys[index], source.values[index])
            rows = torch.tensor(block.rows, device=mb.targets.device)
            set_targets(mb.targets[rows][:, width - block.response_width :], entropy)
            out = model(
                input_ids=block.input_ids,
                attention_mask=block.attention_mask,
                position_ids=block.position_ids,
                past_key_values=block_cache,
                use_cache=True,
            )
            # right-align into the micro-batch's width; the zeros sit under mask 0
            parts.append(
                torch.nn.functional.pad(out.logits, (0, 0, width - block.response_width, 0))
            )
        if len(parts) == 1:
            return parts[0]
        order = [row for block in prefix.blocks for row in block.rows]
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[order] = torch.arange(len(order))
        return torch.cat(parts)[inverse.to(parts[0].device)]


def shares_prefix(model: Any) -> bool:
    """Whether ``model`` can run a micro-batch's shared-prompt layout: a plain full-attention KV
    cache (sliding-window and recurrent layers keep no exact prefix), and no gradient
    checkpointing while training (transformers drops the cache under it)."""
    if model.training and getattr(model, "is_activation_checkpointing", False):
        return False
    return full_attention_cache(model)
