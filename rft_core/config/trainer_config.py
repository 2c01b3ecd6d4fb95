"""``trainer.trainer_config``: the verl-style trainer config dict Trinity-RFT passes to its verl
backend (``actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu`` ...), read onto our settings.

:data:`MAPPING` lists the verl keys that have a setting here; :func:`apply_trainer_config` copies
each one given onto it, and every other leaf of the dict is named, with its full YAML path, by
:func:`unmapped_trainer_config` (the unimplemented-settings warnings), so nothing in it is
silently ignored.

Precedence when a key is given both here and in our own field follows Trinity-RFT 0.6
(``trinity/common/verl_config.py``, ``veRLConfig.synchronize_config``):

- ``actor.grad_clip``, ``actor.use_dynamic_bsz``, ``actor.ppo_max_token_len_per_gpu``: the
  trainer_config value wins (Trinity fills them from ``trainer.*`` only when unset there).
  ``use_dynamic_bsz`` true (given here, else ``trainer.use_dynamic_bsz``, default true) forms
  micro-batches by token count and ignores ``ppo_micro_batch_size_per_gpu`` (warned), as verl;
  false makes micro-batches of ``ppo_micro_batch_size_per_gpu`` sequences (verl's default 1);
- ``actor.optim.*``: ``algorithm.optimizer`` wins (Trinity copies it over the verl optimizer).
  Trinity does so even for fields left at their defaults, which silently drops a
  trainer_config learning rate; we apply the trainer_config value when the matching
  ``algorithm.optimizer`` field is not written (a deliberate fix);
- the others (ppo_epochs, gradient checkpointing, remove-padding) have no Trinity-side twin
  in 0.6: the trainer_config value wins.

Whichever side loses, a warning names both paths and values when they differ.
``actor.ppo_mini_batch_size`` is overwritten by ``buffer.train_batch_size`` (one optimizer step
per batch and epoch), as in Trinity, and is warned about when set.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

if TYPE_CHECKING:
    from rft_core.config.schema import Config

log = logging.getLogger(__name__)

PATH = "trainer.trainer_config"
ACTOR = "actor_rollout_ref.actor"


@dataclass(frozen=True)
class Mapped:
    """One verl key: the setting it lands on and which side wins when both are written."""

    target: str  # dotted path in our config
    trainer_config_wins: bool
    convert: Any = None  # value -> our value (None: as given)


def _lower(value: Any) -> Any:
    return str(value).lower()


MAPPING: dict[str, Mapped] = {
    # these two decide trainer.micro_batch_size_per_gpu together (_apply_micro_batching)
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": Mapped("trainer.micro_batch_size_per_gpu", True),
    f"{ACTOR}.use_dynamic_bsz": Mapped("trainer.micro_batch_size_per_gpu", True),
    f"{ACTOR}.ppo_epochs": Mapped("trainer.ppo_epochs", True),
    f"{ACTOR}.grad_clip": Mapped("trainer.grad_clip", True),
    f"{ACTOR}.ppo_max_token_len_per_gpu": Mapped("trainer.max_token_len_per_gpu", True),
    f"{ACTOR}.optim.lr": Mapped("algorithm.optimizer.lr", False),
    f"{ACTOR}.optim.lr_warmup_steps": Mapped("algorithm.optimizer.lr_warmup_steps", False),
    f"{ACTOR}.optim.lr_warmup_steps_ratio": Mapped(
        "algorithm.optimizer.lr_warmup_steps_ratio", False
    ),
    f"{ACTOR}.optim.min_lr_ratio": Mapped("algorithm.optimizer.min_lr_ratio", False),
    f"{ACTOR}.optim.warmup_style": Mapped("algorithm.optimizer.lr_scheduler_type", False, _lower),
    f"{ACTOR}.optim.lr_scheduler_type": Mapped(
        "algorithm.optimizer.lr_scheduler_type", False, _lower
    ),
    f"{ACTOR}.optim.weight_decay": Mapped("algorithm.optimizer.weight_decay", False),
    f"{ACTOR}.optim.betas": Mapped("algorithm.optimizer.betas", False, list),
    f"{ACTOR}.optim.clip_grad": Mapped("algorithm.optimizer.clip_grad", False),
    f"{ACTOR}.optim.optimizer": Mapped("algorithm.optimizer.optimizer_type", False, _lower),
    "actor_rollout_ref.model.enable_gradient_checkpointing": Mapped(
        "trainer.gradient_checkpointing", True
    ),
    "actor_rollout_ref.model.use_remove_padding": Mapped("trainer.use_remove_padding", True),
    # verl compiles the actor's log-prob/entropy computation; ours compiles that and the norms/MLP
    f"{ACTOR}.use_torch_compile": Mapped("trainer.use_torch_compile", True),
    # verl's retention (its trainer section): our trainer.max_checkpoints_to_keep, Trinity's name
    "trainer.max_actor_ckpt_to_keep": Mapped("trainer.max_checkpoints_to_keep", False),
    "trainer.max_ckpt_to_keep": Mapped("trainer.max_checkpoints_to_keep", False),
}

# set by Trinity itself from our settings: named when given, never applied
_OVERWRITTEN = {
    f"{ACTOR}.ppo_mini_batch_size": "buffer.train_batch_size (one optimizer step per batch)",
    f"{ACTOR}.optim.total_training_steps": "trainer.total_steps",
}


def leaves(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted path, value)`` of every leaf of a nested dict (a list is one leaf)."""
    if OmegaConf.is_config(tree):
        tree = OmegaConf.to_container(tree, resolve=True)
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, tree


def unmapped_trainer_config(cfg: Config) -> list[tuple[str, Any]]:
    """``(yaml path, value)`` of each ``trainer_config`` leaf with no setting here (those that
    Trinity overwrites, :data:`_OVERWRITTEN`, among them)."""
    given = getattr(cfg.trainer, "trainer_config", None) or {}
    return [(f"{PATH}.{key}", value) for key, value in leaves(given) if key not in MAPPING]


def apply_trainer_config(cfg: Config, written: Config) -> None:
    """Copy the mapped ``trainer_config`` values onto ``cfg`` (``written``: the config as the
    user wrote it, to tell a written field from a default), by the module's precedence."""
    given = dict(leaves(cfg.trainer.trainer_config or {}))
    for key, value in given.items():
        if key in _OVERWRITTEN:  # besides the unimplemented-settings warning: what instead
            log.warning("%s.%s: RFT Studio uses %s instead", PATH, key, _OVERWRITTEN[key])
        mapped = MAPPING.get(key)
        if mapped is None or value is None or mapped.target == "trainer.micro_batch_size_per_gpu":
            continue
        ours = mapped.convert(value) if mapped.convert else value
        section, name = mapped.target.rsplit(".", 1)
        holder = _get(cfg, section)
        own_written = _is_written(written, mapped.target)
        own_value = getattr(holder, name)
        if own_written and own_value != ours:
            winner = f"{PATH}.{key}" if mapped.trainer_config_wins else mapped.target
            log.warning(
                "%s.%s = %s and %s = %s are both set: %s is used (Trinity-RFT's precedence)",
                PATH,
                key,
                value,
                mapped.target,
                own_value,
                winner,
            )
        if mapped.trainer_config_wins or not own_written:
            setattr(holder, name, ours)
    _apply_micro_batching(cfg, written, given)


def _apply_micro_batching(cfg: Config, written: Config, given: dict[str, Any]) -> None:
    """verl's ``use_dynamic_bsz`` (given here, else ``trainer.use_dynamic_bsz``, Trinity's rule):
    true forms micro-batches by token count (``ppo_max_token_len_per_gpu``) and ignores
    ``ppo_micro_batch_size_per_gpu``; false uses that count (verl's default 1)."""
    t = cfg.trainer
    dynamic_key, count_key = f"{ACTOR}.use_dynamic_bsz", f"{ACTOR}.ppo_micro_batch_size_per_gpu"
    dynamic = bool(given[dynamic_key]) if dynamic_key in given else bool(t.use_dynamic_bsz)
    count = given.get(count_key)
    ours_written = _is_written(written, "trainer.micro_batch_size_per_gpu")
    if dynamic:
        if count is not None:
            log.warning(
                "%s.%s = %s has no effect: with use_dynamic_bsz true micro-batches are formed by "
                "token count (trainer.max_token_len_per_gpu), as in verl; set %s.%s: false to use it",
                PATH,
                count_key,
                count,
                PATH,
                dynamic_key,
            )
        if dynamic_key in given:
            if ours_written and t.micro_batch_size_per_gpu is not None:
                log.warning(
                    "trainer.micro_batch_size_per_gpu = %s is not used: %s.%s is true",
                    t.micro_batch_size_per_gpu,
                    PATH,
                    dynamic_key,
                )
            t.micro_batch_size_per_gpu = None
        return
    if count is None:
        count = t.micro_batch_size_per_gpu if ours_written else 1
    elif ours_written and t.micro_batch_size_per_gpu != count:
        log.warning(
            "%s.%s = %s and trainer.micro_batch_size_per_gpu = %s are both set: the first is used",
            PATH,
            count_key,
            count,
            t.micro_batch_size_per_gpu,
        )
    t.micro_batch_size_per_gpu = count


def _get(cfg: Config, dotted: str) -> Any:
    value: Any = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _is_written(written: Config, dotted: str) -> bool:
    """The user wrote ``dotted`` (its value differs from the schema default)."""
    section, name = dotted.rsplit(".", 1)
    holder = _get(written, section)
    for f in dataclasses.fields(holder):
        if f.name == name:
            default = (
                f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            )
            return getattr(holder, name) != default
    raise KeyError(dotted)
