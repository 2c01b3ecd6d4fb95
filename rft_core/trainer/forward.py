"""The trainer's forwards: a step's experiences cut into micro-batches, and the log-probs of
their response tokens under a model.

Log-probs are ``log_softmax(logits / temperature)`` in fp32, the rollout engines' convention
(``rft_core.modeling.token_logprobs``), so that an on-policy importance ratio is 1 up to
numerics. Only the logits predicting the response tokens are computed (``logits_to_keep``, see
``rft_core.trainer.batching`` for the padding layout); when prompts repeat in a micro-batch each
distinct prompt runs once and its KV cache serves every response to it (``SharedPrefix``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache

from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.experience import Experience
from rft_core.modeling import cpu_attention, full_attention_cache, token_logprobs
from rft_core.trainer.batching import (
    MicroBatch,
    SharedPrefix,
    collate,
    micro_batches,
    padding_micro_batch,
    response_mask,
)
from rft_core.trainer.chunked_logprobs import (
    DEFAULT_CHUNK_TOKENS,
    HeadScores,
    head_scores,
    scores_in_head,
)
from rft_core.trainer.collectives import StepRanks


class PolicyForward:
    """Micro-batches and forwards of one trainer process (one rank of several, or alone)."""

    def __init__(
        self,
        *,
        ranks: StepRanks,
        temperature: float,
        pad_token_id: int,
        micro_batch_size: int | None,
        max_token_len: int | None,
        share_prompt_prefix: bool,
        pack_rows: bool = False,
        logprob_chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
        fused_head: bool = False,
    ) -> None:
        self.ranks = ranks
        self.device = ranks.device
        self.temperature = temperature
        self.pad_token_id = pad_token_id
        self.micro_batch_size = micro_batch_size
        self.max_token_len = max_token_len
        # run a prompt shared by several rows once (batching.SharedPrefix); off: the plain
        # layout. Sharded ranks keep the plain layout: one forward per micro-batch on every rank
        self.share_prompt_prefix = share_prompt_prefix and not ranks.sharded
        # padding-free micro-batches (batching.PackedRows) where no shared prefix runs
        self.pack_rows = pack_rows
        self.logprob_chunk_tokens = logprob_chunk_tokens
        # the head's soft-max work as compiled kernels (chunked_logprobs, use_torch_compile)
        self.fused_head = fused_head

    def micro_batches(self, experiences: list[Experience]) -> list[MicroBatch]:
        """The step's micro-batches, as many on every rank (padding ones where rows run out)."""
        seqs = [(e.prompt_ids, e.response_ids, response_mask(e)) for e in experiences]
        lengths = [len(p) + len(r) for p, r, _ in seqs]
        groups, padding = self.ranks.in_step(
            micro_batches(lengths, self.micro_batch_size, self.max_token_len, packed=self.pack_rows)
        )
        mbs = [
            collate([seqs[i] for i in g], g, self.pad_token_id, self.device, pack=self.pack_rows)
            for g in groups
        ]
        return mbs + [padding_micro_batch(mbs[0]) for _ in range(padding)]

    def logprobs(
        self, model: Any, mb: MicroBatch, *, entropy: bool = False, entropy_grad: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """[B, R] log-probs of the response tokens and (``entropy``) the [B, R] entropy of each
        position's next-token distribution, both fp32 under ``temperature``; the entropy
        carries a gradient only with ``entropy_grad`` (an entropy bonus). The logits are
        computed a chunk of tokens at a time inside the model's forward
        (``chunked_logprobs``), never whole."""
        scores = self.token_scores(model, mb, entropy=entropy, entropy_grad=entropy_grad)
        return scores[..., 0], scores[..., 1] if entropy else None

    def token_scores(
        self,
        model: Any,
        mb: MicroBatch,
        *,
        entropy: bool = False,
        entropy_grad: bool = False,
        top1: bool = False,
    ) -> torch.Tensor:
        """[B, R, 3]: ``logprobs``' two, and (``top1``) 1.0 where the response token is the
        model's most likely next token (SFT's token accuracy; no gradient), else zeros."""
        with cpu_attention(model):
            if not scores_in_head(model):
                return self._scores_from_logits(model, mb, entropy, top1)
            with head_scores(
                model,
                temperature=self.temperature,
                with_entropy=entropy,
                entropy_grad=entropy_grad,
                chunk_tokens=self.logprob_chunk_tokens,
                fused=self.fused_head,
                with_top1=top1,
            ) as head:
                return self._scores(model, mb, head)

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

    def _scores(self, model: Any, mb: MicroBatch, head: HeadScores) -> torch.Tensor:
        """[B, R, 3] (log-prob, entropy, top-1) of the response tokens, on the micro-batch's cheapest
        layout: shared prefix, packed rows, or the padded rows."""
        prefix = mb.shared_prefix
        if prefix is not None and self.share_prompt_prefix and shares_prefix(model):
            return self._shared_prefix_scores(model, prefix, mb.response_width, head)
        width = mb.response_width
        if mb.packed is not None:
            packed = mb.packed
            head.targets = packed.targets
            out = model(
                input_ids=packed.input_ids,
                position_ids=packed.position_ids,
                use_cache=False,
                logits_to_keep=packed.logits_index,
            ).logits[0]
            channels = out.shape[-1]
            flat = out.new_zeros(mb.targets.numel(), channels).index_copy(0, packed.slot, out)
            return flat.view(*mb.targets.shape, channels)
        seq_len = mb.input_ids.shape[1]
        head.targets = mb.targets
        return model(
            input_ids=mb.input_ids,
            attention_mask=mb.attention_mask,
            position_ids=mb.position_ids,
            use_cache=False,
            logits_to_keep=torch.arange(seq_len - width - 1, seq_len - 1, device=self.device),
        ).logits

    def _shared_prefix_scores(
        self, model: Any, prefix: SharedPrefix, width: int, head: HeadScores
    ) -> torch.Tensor:
        """``_scores`` on the shared-prefix layout: each distinct prompt runs once; its KV cache
        (not detached: every row's gradient flows back into it) is expanded to the rows of each
        response block, which run on top of it."""
        cache = DynamicCache(config=model.config)
        head.targets = prefix.input_ids[:, :0]  # the prefix predicts nothing scored
        model(
            input_ids=prefix.input_ids,
            attention_mask=prefix.attention_mask,
            position_ids=prefix.position_ids,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=torch.arange(0, device=self.device),
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
            head.targets = block.input_ids[:, 1:]
            scores = model(
                input_ids=block.input_ids,
                attention_mask=block.attention_mask,
                position_ids=block.position_ids,
                past_key_values=block_cache,
                use_cache=True,
                logits_to_keep=torch.arange(block.response_width, device=self.device),
            ).logits
            # right-align into the micro-batch's width; the zeros sit under mask 0
            parts.append(torch.nn.functional.pad(scores, (0, 0, width - scores.shape[1], 0)))
        if len(parts) == 1:
            return parts[0]
        order = [row for block in prefix.blocks for row in block.rows]
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[order] = torch.arange(len(order))
        return torch.cat(parts)[inverse.to(parts[0].device)]

    def _scores_from_logits(
        self, model: Any, mb: MicroBatch, entropy: bool, top1: bool
    ) -> torch.Tensor:
        """``token_scores`` for a model whose head is not a plain linear map (logit
        soft-capping, a scale): from its [B, R, V] logits, held whole, on the padded layout."""
        out = model(
            input_ids=mb.input_ids,
            attention_mask=mb.attention_mask,
            position_ids=mb.position_ids,
            use_cache=False,
            logits_to_keep=mb.response_width + 1,
        )
        logits = out.logits[:, :-1].float()
        if self.temperature != 1.0:
            logits = logits / self.temperature
        logp = token_logprobs(logits, mb.targets, 1.0)
        zeros = torch.zeros_like(logp)
        hits = (logits.argmax(-1) == mb.targets).float() if top1 else zeros
        return torch.stack([logp, entropy_from_logits(logits) if entropy else zeros, hits], -1)


def shares_prefix(model: Any) -> bool:
    """Whether ``model`` can run a micro-batch's shared-prompt layout: a plain full-attention KV
    cache (sliding-window and recurrent layers keep no exact prefix), and no gradient
    checkpointing while training (transformers drops the cache under it)."""
    if model.training and getattr(model, "is_activation_checkpointing", False):
        return False
    return full_attention_cache(model)
