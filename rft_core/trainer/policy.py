"""The policy update: ``PolicyUpdater.train_step``, one optimizer step over a batch of
experiences, and the weights it serves (``PolicyCheckpoints``: sync, save, resume).

The class orchestrates; each concern has its module:

- ``models``: the policy, the frozen reference and the PPO critic, their dtypes, devices and
  FSDP2 sharding;
- ``forward``: micro-batches and the log-probs of the response tokens;
- ``advantages``: the advantages the step trains on (the explorer's as they arrive, or computed
  here where the algorithm says: KL-penalized rewards, token-level fns);
- ``token_losses`` (PPO-clip, SFT) and ``pair_losses`` (DPO): the backward pass of the policy
  loss that ``algorithm.policy_loss_fn`` picks from ``POLICY_LOSSES``, by its inputs;
- ``metrics``: the step's metrics under Trinity's names;
- ``collectives``: what keeps several trainer ranks (``ranks.TrainerRanks``) in step.

Then grad clip, the optimizer step (skipped on a non-finite gradient norm or when nothing was
trained) — ``trainer.ppo_epochs`` times over the same batch — and the LR schedule, once.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from rft_core.algorithms.policy_losses import POLICY_LOSSES
from rft_core.algorithms.settings import AlgorithmSettings
from rft_core.config.schema import AlgorithmConfig
from rft_core.experience import Experience
from rft_core.modeling import resolve_device
from rft_core.trainer.batching import MicroBatch
from rft_core.trainer.collectives import StepRanks
from rft_core.trainer.forward import PolicyForward
from rft_core.trainer.fusion import DEFAULT_SCOPE, wants_compile
from rft_core.trainer.master_weights import MasterWeights
from rft_core.trainer.metrics import step_metrics
from rft_core.trainer.models import build_critic, load_policy_models
from rft_core.trainer.offload import offload_optimizer_state, reload_optimizer_state
from rft_core.trainer.optimizer import build_optimizer, build_scheduler
from rft_core.trainer.pair_losses import pair_losses_backward
from rft_core.trainer.policy_checkpoints import PolicyCheckpoints
from rft_core.trainer.token_losses import token_losses_backward

log = logging.getLogger(__name__)


class PolicyUpdater(PolicyCheckpoints):
    """The policy updates of one trainer process (alone, or one rank of a ``TrainerRanks``): its models,
    optimizer and LR schedule, and the step over a batch of experiences."""

    def __init__(
        self,
        model_path: str,
        algorithm_cfg: AlgorithmConfig,
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
        use_remove_padding: bool | None = None,
        use_torch_compile: bool | None = None,
        compile_scope: str = DEFAULT_SCOPE,
        ppo_epochs: int = 1,
    ) -> None:
        torch.manual_seed(seed)
        random.seed(seed)
        ranks = StepRanks.of_process(resolve_device(device))
        self.algo = AlgorithmSettings.from_config(algorithm_cfg)
        self.policy_loss = POLICY_LOSSES.get(self.algo.policy_loss_fn)
        # seq-mean-token-sum-norm's constant divisor (model.max_response_tokens); None: the
        # longest response of each batch
        self.loss_horizon = loss_horizon
        self.grad_clip = grad_clip
        self.ppo_epochs = ppo_epochs  # optimizer steps over each batch (verl's actor.ppo_epochs)
        self.total_steps = total_steps
        self.global_step = 0
        self.world_size, self.rank, self.sharded = ranks.world_size, ranks.rank, ranks.sharded
        self.model_path = Path(model_path)
        compiled = wants_compile(use_torch_compile, ranks.device)
        models = load_policy_models(
            model_path,
            device=ranks.device,
            dtype=dtype,
            needs_reference=self.algo.needs_reference,
            gradient_checkpointing=gradient_checkpointing,
            sharded=self.sharded,
            compile_scope=compile_scope if compiled else None,
        )
        self.device = models.device
        self.tokenizer = models.tokenizer
        self.model = models.model
        self.ref_model = models.ref_model
        self.forward = PolicyForward(
            ranks=dataclasses.replace(ranks, device=models.device),
            temperature=temperature if temperature > 0 else 1.0,
            pad_token_id=models.pad_token_id,
            micro_batch_size=micro_batch_size,
            max_token_len=max_token_len,
            share_prompt_prefix=share_prompt_prefix,
            # None pads: on CPU the padded forward measured faster, on the H200 packing no faster
            # (transformers hands sdpa a packed batch as one block-diagonal [T, T] mask)
            pack_rows=bool(use_remove_padding),
            fused_head=compiled,
        )
        # bf16 parameters: the optimizer steps their fp32 masters (master_weights)
        self.master = (
            MasterWeights(list(self.model.parameters())) if models.master_weights else None
        )
        self.optimizer = build_optimizer(
            self.master.masters if self.master else self.model.parameters(),
            self.algo.optimizer,
            self.device,
        )
        self.scheduler = build_scheduler(self.optimizer, self.algo.optimizer, total_steps)
        self._offloaded: tuple[list[tuple[int, str]], str] | None = None  # offload_optimizer
        self.critic = None
        if self.algo.use_critic:
            self.critic = build_critic(
                critic_model_path or model_path,
                self.algo.optimizer,
                device=self.device,
                grad_clip=grad_clip,
                # the critic keeps fp32 parameters under bf16 autocast on CUDA
                autocast_dtype=torch.bfloat16 if models.master_weights else None,
                world_size=self.world_size,
            )

    # ---- forward ------------------------------------------------------------------------

    def _micro_batches(self, experiences: list[Experience]) -> list[MicroBatch]:
        return self.forward.micro_batches(experiences)

    def _logprobs(
        self, model: Any, mb: MicroBatch, *, entropy: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self.forward.logprobs(model, mb, entropy=entropy)

    def logprobs_of(
        self, experiences: list[Experience], *, reference: bool = False
    ) -> list[list[float]]:
        """Response-token log-probs under the current (or the reference) model."""
        return self.forward.logprobs_of(self.ref_model if reference else self.model, experiences)

    # ---- colocate: the optimizer state's memory --------------------------------------------

    def offload_optimizer(self) -> None:
        """Move the optimizer state to pinned host memory (colocate: while the rollout engine
        generates on this GPU); a no-op on a CPU trainer. ``reload_optimizer`` undoes it."""
        if self.device.type == "cpu" or self._offloaded is not None:
            return
        self._offloaded = offload_optimizer_state(self.optimizer)

    def reload_optimizer(self) -> None:
        """Bring the optimizer state back to the trainer's device (before ``train_step``)."""
        if self._offloaded is None:
            return
        moved, device = self._offloaded
        reload_optimizer_state(self.optimizer, moved, device)
        self._offloaded = None

    # ---- the step -----------------------------------------------------------------------

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        """One optimizer step over ``experiences``; returns metrics under Trinity's names."""
        if not experiences:
            raise ValueError("train_step needs at least one experience")
        start = time.perf_counter()
        self.reload_optimizer()  # a no-op unless colocate left the state on the host
        self.model.train()
        lr = self.scheduler.get_last_lr()[0]
        if self.ppo_epochs > 1:
            experiences = self._with_old_logprobs(experiences)
        epochs: list[dict[str, float]] = []
        for _ in range(self.ppo_epochs):
            metrics, grad_norm, trained = self._update(experiences)
            epochs.append({**metrics, "actor/grad_norm": float(grad_norm)})
            if not trained:
                break
        # several epochs (trainer.ppo_epochs): their mean, as verl reports them
        metrics = {k: sum(e[k] for e in epochs) / len(epochs) for k in epochs[-1]}
        grad_norm = metrics.pop("actor/grad_norm")
        with warnings.catch_warnings():
            # a skipped update still advances the schedule: it counts trainer steps
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step")
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.global_step += 1
        elapsed = time.perf_counter() - start
        metrics.update(
            step_metrics(
                experiences,
                self.forward.ranks,
                grad_norm=grad_norm,
                lr=float(lr),
                elapsed=elapsed,
                # sft, dpo on dataset rows: no reward of their own; an sft loss over rollouts
                # (raft) has the explorer's rewards (a rollout has its task's group_id)
                rewarded=self.policy_loss.inputs in ("advantages", "mixed")
                or any(e.group_id and not e.info.get("is_expert") for e in experiences),
            )
        )
        return metrics

    def _update(self, experiences: list[Experience]) -> tuple[dict[str, float], Any, bool]:
        """One pass over ``experiences``: the policy loss's backward, grad clip and the
        optimizer step; returns the metrics, the gradient norm and whether anything trained."""
        self.optimizer.zero_grad(set_to_none=True)
        models = dict(model=self.model, ref_model=self.ref_model)
        if self.policy_loss.inputs == "pairs":
            metrics, trained = pair_losses_backward(
                experiences, self.policy_loss, self.algo, self.forward, **models
            )
        else:
            metrics, trained = token_losses_backward(
                experiences,
                self.policy_loss,
                self.algo,
                self.forward,
                **models,
                critic=self.critic,
                loss_horizon=self.loss_horizon,
                global_step=self.global_step,
            )
        stepped = self.master.masters if self.master else self.model.parameters()
        grad_norm = torch.nn.utils.clip_grad_norm_(stepped, self.grad_clip)
        if hasattr(grad_norm, "full_tensor"):
            grad_norm = grad_norm.full_tensor()
        if not trained:
            # every response of the batch was masked (all groups filtered): no update, not even
            # AdamW's momentum and weight decay on zero gradients
            log.warning(
                "step %d: no trainable tokens in the batch, update skipped", self.global_step + 1
            )
        elif torch.isfinite(grad_norm):
            self.optimizer.step()
            if self.master is not None:
                self.master.copy_to_model()
        else:
            log.warning(
                "step %d: non-finite grad norm %s, update skipped",
                self.global_step + 1,
                float(grad_norm),
            )
        return metrics, grad_norm, trained

    def _with_old_logprobs(self, experiences: list[Experience]) -> list[Experience]:
        """Several epochs over one batch: an experience without the engine's log-probs gets
        them from the model before the first update, so later epochs' ratios are against the
        policy that sampled the batch, not the one being trained."""
        if self.policy_loss.inputs == "pairs":
            return experiences
        missing = [
            i
            for i, e in enumerate(experiences)
            if e.response_ids and len(e.logprobs) != len(e.response_ids)
        ]
        if not missing and not self.sharded:
            return experiences
        # sharded ranks run the forward together (FSDP collectives) even with nothing missing
        rows = [experiences[i] for i in missing]
        with torch.no_grad():
            logprobs = self.forward.logprobs_of(self.model, rows)
        self.model.train()
        out = list(experiences)
        for i, lp in zip(missing, logprobs, strict=True):
            out[i] = dataclasses.replace(experiences[i], logprobs=list(lp))
        return out
