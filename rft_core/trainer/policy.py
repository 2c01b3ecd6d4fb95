"""The policy update: one optimizer step over a batch of experiences (``train_step``).

Per micro-batch (see ``rft_core.trainer.batching`` for the padding layout) the actor computes
the log-probs of the response tokens as ``log_softmax(logits / temperature)`` in fp32, the
same convention as the rollout engines (``rft_core.rollout.hf``), so that an on-policy
importance ratio is 1 up to numerics. The loss is

    pg_loss (ppo-clip with dual clip | sft | dpo) + kl_coef · KL(policy, ref) - entropy_coef · H

aggregated by ``algorithm.loss_agg_mode``; micro-batch losses are weighted so that gradient
accumulation equals one pass over the whole batch. Then grad clip, AdamW, LR schedule.

Where things come from:
- old log-probs: the rollout engine's (``Experience.logprobs``), recomputed here only when an
  experience carries none;
- advantages: group algorithms (grpo, rloo) use ``Experience.advantage`` computed by the
  explorer; only when it is None does the trainer compute it here from rewards and group ids
  with the same registry function. Token-level ones (reinforceplusplus, ppo/gae) are computed
  here over the whole batch; ``kl_penalty_fn`` applies to these token rewards, and for rloo
  to each response's reward, after which the trainer recomputes its group advantages (as
  Trinity, which computes rloo in the trainer); grpo ignores it, as Trinity (see presets);
- reference model: loaded once from ``model_path`` when a KL term or DPO needs it.

Devices: fp32 on CPU; on CUDA fp32 master weights with bf16 autocast (``dtype: auto``), and
FSDP2 ``fully_shard`` per decoder layer when torch.distributed runs with world size > 1 (bf16
params, fp32 reduce). The tests run on CPU only; the CUDA and FSDP2 paths are not tested here.
"""

from __future__ import annotations

import inspect
import logging
import random
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from rft_core.algorithms import advantages as adv
from rft_core.algorithms.aggregation import aggregate_loss, masked_mean
from rft_core.algorithms.entropy import entropy_from_logits
from rft_core.algorithms.kl import apply_kl_penalty, kl_loss, kl_penalized_rewards
from rft_core.algorithms.policy_losses import dpo_loss, ppo_clip_loss, sft_loss
from rft_core.buffer.experience import Experience
from rft_core.errors import ConfigError
from rft_core.rollout.hf import (
    cpu_attention,
    full_attention_cache,
    resolve_device,
    resolve_dtype,
    token_logprobs,
)
from rft_core.trainer.batching import (
    MicroBatch,
    SharedPrefix,
    collate,
    is_trained,
    loss_weight,
    micro_batches,
    padding_micro_batch,
    response_mask,
    right_aligned,
    split_to_count,
)
from rft_core.trainer.messages import experiences_from_messages
from rft_core.trainer.policy_checkpoints import PolicyCheckpoints
from rft_core.trainer.ranks import max_across_ranks, sum_across_ranks, sum_tensor_across_ranks
from rft_core.trainer.settings import (
    AlgorithmSettings,
    accepted_args,
    build_optimizer,
    build_scheduler,
    lr_factor,
)

log = logging.getLogger(__name__)

__all__ = ["AlgorithmSettings", "PolicyTrainer", "experiences_from_messages", "lr_factor"]


class PolicyTrainer(PolicyCheckpoints):
    def __init__(
        self,
        model_path: str,
        algorithm_cfg: Any,
        *,
        device: str | None = None,
        dtype: str = "auto",
        micro_batch_size: int | None = 8,
        grad_clip: float = 1.0,
        total_steps: int | None = None,
        gradient_checkpointing: bool = False,
        temperature: float = 1.0,
        seed: int = 0,
        max_token_len: int | None = None,
        critic_model_path: str | None = None,
        share_prompt_prefix: bool = True,
        loss_horizon: int | None = None,
    ) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.manual_seed(seed)
        random.seed(seed)
        self.device = resolve_device(device)
        self.algo = AlgorithmSettings.from_config(algorithm_cfg)
        self.micro_batch_size = micro_batch_size
        self.max_token_len = max_token_len
        # seq-mean-token-sum-norm's constant divisor (model.max_response_tokens); None: the
        # longest response of each batch
        self.loss_horizon = loss_horizon
        self.grad_clip = grad_clip
        self.total_steps = total_steps
        self.temperature = temperature if temperature > 0 else 1.0
        self.global_step = 0
        self.world_size, self.rank = 1, 0
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            self.world_size = torch.distributed.get_world_size()
            self.rank = torch.distributed.get_rank()
        self.sharded = self.world_size > 1
        # run a prompt shared by several rows once (batching.SharedPrefix); off: the plain layout.
        # Sharded ranks keep the plain layout: one forward per micro-batch on every rank
        self.share_prompt_prefix = share_prompt_prefix and not self.sharded

        # "auto": fp32 master weights, bf16 autocast on CUDA; an explicit dtype trains in it
        explicit = resolve_dtype(dtype, self.device) if dtype not in (None, "auto") else None
        param_dtype = explicit or torch.float32
        self.autocast_dtype = (
            torch.bfloat16 if explicit is None and self.device.type == "cuda" else None
        )
        self.model_path = Path(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        pad = self.tokenizer.pad_token_id
        self.pad_token_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=param_dtype)
        self.model.config.use_cache = False
        if gradient_checkpointing:
            self.model.gradient_checkpointing_enable(
                gradient_checkpointing_kwargs={"use_reentrant": False}
            )
        self.ref_model = None
        if self.algo.needs_reference:
            # the frozen reference needs no fp32 master copy: under autocast it runs in bf16
            ref_dtype = self.autocast_dtype or param_dtype
            self.ref_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=ref_dtype)
            self.ref_model.requires_grad_(False).eval()
        if self.sharded:
            self._fully_shard()
        else:
            self.model.to(self.device)
            if self.ref_model is not None:
                self.ref_model.to(self.device)

        self.optimizer = build_optimizer(self.model.parameters(), self.algo.optimizer, self.device)
        self.scheduler = build_scheduler(self.optimizer, self.algo.optimizer, total_steps)
        o = self.algo.optimizer
        self.critic = None
        if self.algo.use_critic:
            from rft_core.trainer.critic import Critic

            self.critic = Critic(
                critic_model_path or model_path,
                device=self.device,
                lr=float(o["lr"]),
                betas=tuple(o["betas"]),
                weight_decay=float(o["weight_decay"]),
                grad_clip=grad_clip,
                autocast_dtype=self.autocast_dtype,
                world_size=self.world_size,
            )

    # ---- setup --------------------------------------------------------------------------

    def _fully_shard(self) -> None:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        if self.device.type == "cuda":
            if self.device.index is None:  # "cuda": the GPU Ray gave this rank's process
                self.device = torch.device("cuda", torch.cuda.current_device())
            torch.cuda.set_device(self.device)
            mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        else:
            mp = MixedPrecisionPolicy()  # CPU ranks (gloo) train in fp32
        for model in (self.model, self.ref_model):
            if model is None:
                continue
            model.to(self.device)
            for layer in model.model.layers:
                fully_shard(layer, mp_policy=mp)
            fully_shard(model, mp_policy=mp)
        self.autocast_dtype = None  # FSDP2 casts parameters itself

    # ---- forward ------------------------------------------------------------------------

    def _logits_tail(self, model: Any, mb: MicroBatch) -> torch.Tensor:
        """Logits predicting the last ``R`` tokens of each row: [B, R, V]."""
        with (
            torch.autocast(
                self.device.type,
                dtype=self.autocast_dtype or torch.bfloat16,
                enabled=self.autocast_dtype is not None,
            ),
            cpu_attention(model),
        ):
            prefix = mb.shared_prefix
            if prefix is not None and self.share_prompt_prefix and shares_prefix(model):
                return self._shared_prefix_logits(model, prefix, mb.response_width)
            out = model(
                input_ids=mb.input_ids,
                attention_mask=mb.attention_mask,
                position_ids=mb.position_ids,
                use_cache=False,
                logits_to_keep=mb.response_width + 1,
            )
        return out.logits[:, :-1]

    def _shared_prefix_logits(self, model: Any, prefix: SharedPrefix, width: int) -> torch.Tensor:
        """``_logits_tail`` on the shared-prefix layout: each distinct prompt runs once; its KV
        cache (not detached: every row's gradient flows back into it) is expanded to the rows of
        each response block, which run on top of it."""
        from transformers import DynamicCache

        cache = DynamicCache(config=model.config)
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
            out = model(
                input_ids=block.input_ids,
                attention_mask=block.attention_mask,
                position_ids=block.position_ids,
                past_key_values=block_cache,
                use_cache=True,
            )
            logits = out.logits[:, :-1]
            # right-align into the micro-batch's width; the zeros sit under mask 0
            parts.append(torch.nn.functional.pad(logits, (0, 0, width - logits.shape[1], 0)))
        if len(parts) == 1:
            return parts[0]
        order = [row for block in prefix.blocks for row in block.rows]
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[order] = torch.arange(len(order))
        return torch.cat(parts)[inverse.to(parts[0].device)]

    def _logprobs(self, model: Any, mb: MicroBatch) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self._logits_tail(model, mb)
        return token_logprobs(logits, mb.targets, self.temperature), logits

    @torch.no_grad()
    def logprobs_of(
        self, experiences: list[Experience], *, reference: bool = False
    ) -> list[list[float]]:
        """Response-token log-probs under the current (or the reference) model."""
        model = self.ref_model if reference else self.model
        model.eval()
        out: list[list[float]] = [[] for _ in experiences]
        for mb in self._micro_batches(experiences):
            logp, _ = self._logprobs(model, mb)
            if mb.padding:
                continue
            for b, row in enumerate(mb.rows):
                n = len(experiences[row].response_ids)
                out[row] = logp[b, mb.response_width - n :].tolist() if n else []
        return out

    def _micro_batches(self, experiences: list[Experience]) -> list[MicroBatch]:
        seqs = [(e.prompt_ids, e.response_ids, response_mask(e)) for e in experiences]
        lengths = [len(p) + len(r) for p, r, _ in seqs]
        groups, padding = self._in_step(
            micro_batches(lengths, self.micro_batch_size, self.max_token_len)
        )
        mbs = [collate([seqs[i] for i in g], g, self.pad_token_id, self.device) for g in groups]
        return mbs + [padding_micro_batch(mbs[0]) for _ in range(padding)]

    # ---- ranks in step (sharded: every rank makes the same collective calls) ------------------

    def _in_step(self, groups: list[list[int]]) -> tuple[list[list[int]], int]:
        """Micro-batch row groups split so that every rank has as many as the busiest one, and
        the padding micro-batches still missing (a rank with too few rows)."""
        if not self.sharded:
            return groups, 0
        return split_to_count(groups, int(max_across_ranks([len(groups)], self.device)[0]))

    def _global(self, *values: float) -> list[float]:
        """Sums over the ranks: the denominators of global means (the values at one rank)."""
        return sum_across_ranks(values, self.device) if self.sharded else list(values)

    # ---- the step -----------------------------------------------------------------------

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One optimizer step over ``experiences``; returns metrics under Trinity's names."""
        if not experiences:
            raise ValueError("train_step needs at least one experience")
        start = time.perf_counter()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        lr = self.scheduler.get_last_lr()[0]
        if self.algo.policy_loss_fn == "dpo":
            metrics = self._dpo_backward(experiences)
        else:
            metrics = self._policy_backward(experiences)
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        if not self._trained:
            # every response of the batch was masked (all groups filtered): no update, not even
            # AdamW's momentum and weight decay on zero gradients
            log.warning(
                "step %d: no trainable tokens in the batch, update skipped", self.global_step + 1
            )
        elif torch.isfinite(grad_norm):
            self.optimizer.step()
        else:
            log.warning(
                "step %d: non-finite grad norm %s, update skipped",
                self.global_step + 1,
                float(grad_norm),
            )
        with warnings.catch_warnings():
            # a skipped update still advances the schedule: it counts trainer steps
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step")
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        elapsed = time.perf_counter() - start
        tokens = sum(
            len(e.prompt_ids) + len(e.response_ids) + len(e.rejected_ids) for e in experiences
        )
        # means over the trained experiences of the global batch (filtered groups and a rank's
        # stand-in count in none); a sharded rank reports its share (ranks.merge_metrics)
        trained = [e for e in experiences if is_trained(e)]
        lengths = [len(e.response_ids) for e in trained]
        (rows,) = self._global(len(trained))
        rows = max(rows, 1.0)
        metrics.update(
            {
                "actor/grad_norm": float(grad_norm),
                "actor/lr": float(lr),
                "critic/rewards/mean": sum(e.reward for e in trained) / rows,
                "response_length/mean": sum(lengths) / rows,
                "response_length/clip_ratio": sum(e.truncated for e in trained) / rows,
                "perf/throughput": tokens / elapsed,
                "time/train_step": elapsed,
            }
        )
        if lengths:
            metrics["response_length/max"] = float(max(lengths))
            metrics["response_length/min"] = float(min(lengths))
        return metrics

    def _old_logprobs(
        self, experiences: list[Experience], mb: MicroBatch, recomputed: torch.Tensor | None
    ) -> torch.Tensor:
        """[B, R] old log-probs: the rollout engine's for each row that carries them, the
        recomputed ones for a row that does not (row by row, so that neither the micro-batch
        layout nor the number of ranks changes which rows keep the engine's)."""
        rows = [experiences[i] for i in mb.rows]
        given = [e.logprobs if len(e.logprobs) == len(e.response_ids) else [] for e in rows]
        engine = right_aligned(given, mb.response_width).to(self.device)
        if recomputed is None:
            return engine
        has = torch.tensor(
            [bool(g) or not e.response_ids for g, e in zip(given, rows, strict=True)]
        )
        return torch.where(has.to(self.device).unsqueeze(-1), engine, recomputed)

    def _advantages(
        self,
        experiences: list[Experience],
        mbs: list[MicroBatch],
        old: list[torch.Tensor],
        ref: list[torch.Tensor | None],
        metrics: dict[str, float],
    ) -> tuple[list[torch.Tensor], list[Any]]:
        """Per-micro-batch [B, R] advantages (and per-mb critic inputs for PPO)."""
        algo = self.algo
        fn = adv.get_advantage_fn(algo.advantage_fn) if algo.advantage_fn else None
        rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)
        if fn is None or fn.level == "group":
            penalize = fn is not None and algo.uses_kl_penalty  # rloo: penalty, then the group fn
            if penalize:
                rewards = self._kl_penalized_rewards(rewards, mbs, old, ref, metrics)
            if not penalize and all(e.advantage is not None for e in experiences):
                seq_adv, keep = torch.tensor([float(e.advantage) for e in experiences]), None
            elif fn is None:
                raise ConfigError(
                    "algorithm.advantage_fn",
                    "experiences carry no advantage and no advantage_fn is set",
                )
            else:
                args = accepted_args(fn.fn, algo.advantage_args, "algorithm.advantage_fn_args")
                seq_adv, keep = fn.group(rewards, [e.group_id for e in experiences], **args)
            out = []
            for mb in mbs:
                a = seq_adv[mb.rows].to(self.device).unsqueeze(-1) * mb.mask
                if keep is not None:
                    mb.mask = mb.mask * keep[mb.rows].to(self.device).float().unsqueeze(-1)
                out.append(a)
            return out, [None] * len(mbs)
        # token-level: the whole batch in one right-aligned [N, R] layout
        width = max(mb.response_width for mb in mbs)
        n = len(experiences)
        mask = torch.zeros(n, width, device=self.device)
        real = [mb for mb in mbs if not mb.padding]
        for mb in real:
            mask[mb.rows, width - mb.response_width :] = mb.mask
        token_rewards = adv.outcome_to_token_rewards(rewards.to(self.device), mask)
        if algo.uses_kl_penalty:
            old_full, ref_full = torch.zeros_like(mask), torch.zeros_like(mask)
            for mb, o, r in zip(mbs, old, ref, strict=True):
                if not mb.padding:
                    old_full[mb.rows, width - mb.response_width :] = o
                    ref_full[mb.rows, width - mb.response_width :] = r
            token_rewards, km = apply_kl_penalty(
                token_rewards, old_full, ref_full, mask, algo.kl_penalty_fn, algo.kl_penalty_coef
            )
            local = float(mask.sum())
            (tokens,) = self._global(local)
            metrics["actor/kl_penalty"] = km["kl_penalty"] * local / max(tokens, 1.0)
        args = accepted_args(fn.fn, algo.advantage_args, "algorithm.advantage_fn_args")
        if self.sharded and "sum_across_ranks" in inspect.signature(fn.fn).parameters:
            args["sum_across_ranks"] = sum_tensor_across_ranks  # batch statistics of all ranks
        critic_inputs: list[Any] = [None] * len(mbs)
        if fn.needs_values:
            if self.critic is None:
                raise ConfigError(
                    "algorithm.advantage_fn", f"{fn.name} needs a critic; use algorithm_type: ppo"
                )
            values = torch.zeros_like(mask)
            with torch.no_grad():
                for mb in real:
                    values[mb.rows, width - mb.response_width :] = self.critic.values(mb) * mb.mask
            token_adv, returns = fn(token_rewards, values, mask, **args)
            critic_inputs = [
                (_rows_of(values, mb, width), _rows_of(returns, mb, width)) for mb in mbs
            ]
        else:
            token_adv = fn(token_rewards, mask, **args)
        return [_rows_of(token_adv, mb, width) for mb in mbs], critic_inputs

    def _kl_penalized_rewards(
        self,
        rewards: torch.Tensor,
        mbs: list[MicroBatch],
        old: list[torch.Tensor],
        ref: list[torch.Tensor | None],
        metrics: dict[str, float],
    ) -> torch.Tensor:
        """Each response's reward minus kl_coef x its summed token KL (old vs reference), for a
        group advantage fn; the explorer's advantages came from the raw rewards."""
        algo = self.algo
        out, kl_sum, tokens = rewards.clone(), 0.0, 0.0
        for mb, o, r in zip(mbs, old, ref, strict=True):
            if mb.padding:
                continue
            penalized, km = kl_penalized_rewards(
                rewards[mb.rows].to(o.device),
                o,
                r,
                mb.mask,
                algo.kl_penalty_fn,
                algo.kl_penalty_coef,
            )
            out[mb.rows] = penalized.cpu()
            n = float(mb.mask.sum())
            kl_sum, tokens = kl_sum + km["kl_penalty"] * n, tokens + n
        (tokens,) = self._global(tokens)
        metrics["actor/kl_penalty"] = kl_sum / max(tokens, 1.0)
        return out

    def _policy_backward(self, experiences: list[Experience]) -> dict[str, float]:
        algo = self.algo
        mbs = self._micro_batches(experiences)
        horizon = self.loss_horizon or max(mb.response_width for mb in mbs)
        if self.sharded and not self.loss_horizon:
            horizon = int(max_across_ranks([horizon], self.device)[0])
        total_tokens, total_rows = self._global(
            float(sum(mb.mask.sum() for mb in mbs)), _trained_rows(experiences, mbs)
        )
        metrics: dict[str, float] = {}
        sft = algo.policy_loss_fn == "sft"
        if not sft and algo.policy_loss_fn != "ppo":
            raise ConfigError(
                "algorithm.policy_loss_fn",
                f"unknown policy loss {algo.policy_loss_fn!r}; choose ppo, sft or dpo",
            )
        old: list[torch.Tensor] = []
        ref: list[torch.Tensor | None] = []
        if not sft:
            recompute = {
                id(mb)
                for mb in mbs
                if any(
                    len(experiences[i].logprobs) != len(experiences[i].response_ids)
                    for i in mb.rows
                )
            }
            # sharded ranks run the forward together (FSDP collectives) when any of them needs
            # it; each keeps the engine's log-probs where it has them
            forward_all = self.sharded and max_across_ranks([len(recompute)], self.device)[0]
            with torch.no_grad():
                if recompute or forward_all:
                    self.model.eval()
                for mb in mbs:
                    needed = id(mb) in recompute
                    logp = self._logprobs(self.model, mb)[0] if needed or forward_all else None
                    old.append(self._old_logprobs(experiences, mb, logp if needed else None))
                    ref.append(
                        self._logprobs(self.ref_model, mb)[0]
                        if self.ref_model is not None
                        else None
                    )
            self.model.train()
            advantages, critic_inputs = self._advantages(experiences, mbs, old, ref, metrics)
            # std_threshold may drop rows
            total_tokens, total_rows = self._global(
                float(sum(mb.mask.sum() for mb in mbs)), _trained_rows(experiences, mbs)
            )
            adv_sum = sum(float((a * mb.mask).sum()) for a, mb in zip(advantages, mbs, strict=True))
            metrics["critic/advantages/mean"] = adv_sum / max(total_tokens, 1.0)
        self._trained = total_tokens > 0  # the same on every rank (a global count)
        pg_args = accepted_args(
            ppo_clip_loss, algo.policy_loss_args, "algorithm.policy_loss_fn_args"
        )
        sums: dict[str, float] = {}
        weights = []
        for k, mb in enumerate(mbs):
            weight = (
                0.0
                if mb.padding
                else loss_weight(algo.loss_agg_mode, mb.mask, total_tokens, total_rows)
            )
            share = float(mb.mask.sum()) / max(total_tokens, 1.0)  # for token-level metrics
            weights.append(weight)
            logp, logits = self._logprobs(self.model, mb)
            if sft:
                loss, m = sft_loss(logp, mb.mask, algo.loss_agg_mode, horizon=horizon)
                parts = {"actor/sft_loss": (m["sft_loss"], weight)}
            else:
                loss, m = ppo_clip_loss(
                    logp,
                    old[k],
                    advantages[k],
                    mb.mask,
                    loss_agg_mode=algo.loss_agg_mode,
                    horizon=horizon,
                    **pg_args,
                )
                parts = {
                    "actor/pg_loss": (m["pg_loss"], weight),
                    "actor/pg_clipfrac": (m["pg_clipfrac"], share),
                    "actor/pg_clipfrac_lower": (m["pg_clipfrac_lower"], share),
                    "actor/ppo_kl": (m["ppo_kl"], share),
                }
                if algo.uses_kl_loss:
                    kl, km = kl_loss(
                        logp, ref[k], mb.mask, algo.kl_loss_fn, algo.loss_agg_mode, horizon=horizon
                    )
                    loss = loss + algo.kl_coef * kl
                    parts["actor/kl_loss"] = (km["kl_loss"], weight)
                    parts["actor/kl_coef"] = (algo.kl_coef, share)
            if algo.entropy_coef > 0:
                entropy = entropy_from_logits(logits)
                loss = loss - algo.entropy_coef * aggregate_loss(
                    entropy, mb.mask, algo.loss_agg_mode, horizon=horizon
                )
                entropy = entropy.detach()
            else:
                with torch.no_grad():
                    entropy = entropy_from_logits(logits.detach())
            parts["actor/entropy"] = (float(masked_mean(entropy, mb.mask)), share)
            # FSDP2 averages gradients over the ranks; each rank's weight is its global share
            (loss * (weight * self.world_size)).backward()
            for name, (value, w) in parts.items():
                sums[name] = sums.get(name, 0.0) + value * w
        metrics.update(sums)
        if self.critic is not None and not sft:
            metrics.update(
                self.critic.update(
                    mbs,
                    [c[0] for c in critic_inputs],
                    [c[1] for c in critic_inputs],
                    weights,
                    algo.loss_agg_mode,
                    horizon,
                )
            )
        return metrics

    def _dpo_backward(self, experiences: list[Experience]) -> dict[str, float]:
        args = accepted_args(dpo_loss, self.algo.policy_loss_args, "algorithm.policy_loss_fn_args")
        sums: dict[str, float] = {}
        pair_lengths = [
            len(e.prompt_ids) + max(len(e.response_ids), len(e.rejected_ids)) for e in experiences
        ]
        size = max(1, (self.micro_batch_size or len(experiences)) // 2)
        groups, padding = self._in_step(micro_batches(pair_lengths, size, self.max_token_len))
        (total_rows,) = self._global(sum(map(is_trained, experiences)))
        self._trained = total_rows > 0
        for k, group in enumerate(groups + [groups[0][:1]] * padding):
            chosen = [
                (
                    experiences[i].prompt_ids,
                    experiences[i].response_ids,
                    [1] * len(experiences[i].response_ids),
                )
                for i in group
            ]
            rejected = [
                (
                    experiences[i].prompt_ids,
                    experiences[i].rejected_ids,
                    [1] * len(experiences[i].rejected_ids),
                )
                for i in group
            ]
            mb = collate(chosen + rejected, group + group, self.pad_token_id, self.device)
            with torch.no_grad():
                ref_sums = (self._logprobs(self.ref_model, mb)[0] * mb.mask).sum(-1)
            logp_sums = (self._logprobs(self.model, mb)[0] * mb.mask).sum(-1)
            p = len(group)
            loss, m = dpo_loss(logp_sums[:p], logp_sums[p:], ref_sums[:p], ref_sums[p:], **args)
            real = k < len(groups) and all(is_trained(experiences[i]) for i in group)
            weight = p / max(total_rows, 1) if real else 0.0  # padding: in step, no share
            (loss * (weight * self.world_size)).backward()
            for name, value in m.items():
                sums[f"actor/{name}"] = sums.get(f"actor/{name}", 0.0) + value * weight
        return sums


def _trained_rows(experiences: list[Experience], mbs: list[MicroBatch]) -> int:
    """Rows the seq-mean losses average over: all but those whose every token is masked (a
    response of no tokens still counts, as one row of loss 0)."""
    return sum(
        1
        for mb in mbs
        if not mb.padding
        for b, row in enumerate(mb.rows)
        if not experiences[row].response_ids or float(mb.mask[b].sum()) > 0
    )


def _rows_of(full: torch.Tensor, mb: MicroBatch, width: int) -> torch.Tensor:
    """``mb``'s rows of a right-aligned [N, width] batch tensor (zeros for padding)."""
    if mb.padding:
        return torch.zeros_like(mb.mask)
    return full[mb.rows, width - mb.response_width :]


def shares_prefix(model: Any) -> bool:
    """Whether ``model`` can run a micro-batch's shared-prompt layout: a plain full-attention KV
    cache (sliding-window and recurrent layers keep no exact prefix), and no gradient
    checkpointing while training (transformers drops the cache under it)."""
    if model.training and getattr(model, "is_activation_checkpointing", False):
        return False
    return full_attention_cache(model)
