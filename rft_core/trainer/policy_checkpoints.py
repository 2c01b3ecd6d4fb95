"""PolicyUpdater's weights and checkpoints: the full state dict for weight sync, saving a step in
the seed's tree (:mod:`rft_core.checkpoint.store`), adding HF weights to a saved step, and
resuming, at one process or several FSDP2 ranks (every rank takes part; rank 0 writes).

An optimizer state saved at one world size resumes at any other: one process keys it by
parameter position (torch's own form), FSDP2 ranks by parameter name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from rft_core.checkpoint import store
from rft_core.checkpoint.layout import latest_checkpoint_step, step_dir
from rft_core.checkpoint.retention import pinned_step


class PolicyCheckpoints:
    """Mixed into PolicyUpdater: needs ``model``, ``optimizer``, ``master`` (fp32 master
    weights or None), ``scheduler``, ``critic``, ``algo``, ``tokenizer``, ``model_path``, ``sharded``, ``rank``, ``world_size``."""

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        """Full model weights as CPU tensors under Hugging Face names (a copy)."""
        if self.sharded:
            return get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def _optimizer_state(self) -> dict[str, Any]:
        if self.sharded:
            return get_optimizer_state_dict(
                self.model,
                self.optimizer,
                options=StateDictOptions(full_state_dict=True, cpu_offload=True),
            )
        state = self.optimizer.state_dict()
        return self.master.add_to_state(state) if self.master is not None else state

    def save(self, job_dir: Path, step: int, save_hf: bool) -> None:
        """Full checkpoint of ``step`` in the seed's layout (rank 0 writes)."""
        state_dict = self.state_dict_for_sync()
        optimizer_state = self._optimizer_state()
        if self.rank != 0:
            return
        extra: dict[str, Any] = {
            "lr_scheduler": self.scheduler.state_dict(),
            "algorithm_type": self.algo.algorithm_type,
        }
        if self.critic is not None:
            extra["critic"] = self.critic.full_state()
        store.save_checkpoint(
            Path(job_dir),
            step,
            state_dict=state_dict,
            optimizer_state=optimizer_state,
            extra_state=extra,
            hf_config=self.model.config,
            tokenizer=self.tokenizer,
            generation_config=getattr(self.model, "generation_config", None),
            save_hf=save_hf,
            world_size=self.world_size,
            tokenizer_source=self.model_path,
        )

    def add_hf_weights(self, job_dir: Path, step: int) -> None:
        """Hugging Face weights into the saved checkpoint of ``step`` (rank 0 writes)."""
        state_dict = self.state_dict_for_sync()
        if self.rank == 0:
            store.add_hf_weights(Path(job_dir), step, state_dict, self.model.config)

    def load(self, job_dir: Path, step: int | None) -> int:
        """Restore model, optimizer, LR schedule, critic and RNG states; return the step. The
        step is pinned while it is read (retention never deletes a step being resumed from). The
        optimizer's hyperparameters (lr, betas, weight decay, ...) stay the config's: a fork
        (``rft_core.checkpoint.fork``) tries new ones from the checkpoint's moments and step."""
        found = step if step is not None else latest_checkpoint_step(Path(job_dir))
        pin = step_dir(Path(job_dir), found) if found is not None else Path(job_dir) / "-"
        with pinned_step(pin, "resume"):
            ckpt = store.load_checkpoint(Path(job_dir), step)
        configured = [
            {k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups
        ]
        base_lrs = list(self.scheduler.base_lrs)
        if ckpt.optimizer_state is not None:  # saved at any world size
            names = [n for n, p in self.model.named_parameters() if p.requires_grad]
            ckpt.optimizer_state = _optimizer_state_keyed(
                ckpt.optimizer_state, names, by_name=self.sharded
            )
        if self.sharded:
            options = StateDictOptions(full_state_dict=True)
            set_model_state_dict(self.model, ckpt.state_dict, options=options)
            if ckpt.optimizer_state is not None:
                set_optimizer_state_dict(
                    self.model, self.optimizer, ckpt.optimizer_state, options=options
                )
        else:
            self.model.load_state_dict(ckpt.state_dict)
            if ckpt.optimizer_state is not None:
                self.optimizer.load_state_dict(ckpt.optimizer_state)
            if self.master is not None:  # fp32 masters: saved ones, else the loaded weights
                self.master.take_from_state(self.optimizer)
        extra = ckpt.extra_state or {}
        if "lr_scheduler" in extra:
            self.scheduler.load_state_dict(extra["lr_scheduler"])
        self._keep_configured_hyperparameters(configured, base_lrs)
        if self.critic is not None and "critic" in extra:
            self.critic.load_full_state(extra["critic"])
        store.restore_rng_state(extra.get("rng") or {})
        self.global_step = ckpt.step
        return ckpt.step

    def _keep_configured_hyperparameters(self, configured: list[dict], base_lrs: list) -> None:
        """The config's optimizer hyperparameters over the checkpoint's, and the lr its
        schedule gives at the restored step (the same values on a plain resume)."""
        self.scheduler.base_lrs = base_lrs
        at = self.scheduler.last_epoch
        for group, hyper, base, factor in zip(
            self.optimizer.param_groups,
            configured,
            base_lrs,
            self.scheduler.lr_lambdas,
            strict=True,
        ):
            group.update(hyper)
            group["lr"] = base * factor(at)
        self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]


def _optimizer_state_keyed(state: dict[str, Any], names: list[str], *, by_name: bool) -> dict:
    """An optimizer state dict with its parameters keyed by name (FSDP2's full form, what
    sharded ranks save and load) or by position (torch's own, one process)."""
    keys = [p for g in state.get("param_groups", []) for p in g["params"]]
    if not keys or isinstance(keys[0], str) == by_name:
        return state
    position = {n: i for i, n in enumerate(names)}

    def key(k: Any) -> Any:
        return names[k] if by_name else position[k]

    return {
        "state": {key(k): v for k, v in state["state"].items()},
        "param_groups": [
            dict(g, params=[key(p) for p in g["params"]]) for g in state["param_groups"]
        ],
    }
