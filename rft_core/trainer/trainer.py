"""The trainer actor: reads experiences, updates the policy, publishes weights, checkpoints.

One trainer step reads ``buffer.train_batch_size`` experiences (from the explorer's buffer, or
from the SFT/DPO dataset in ``train`` mode) and makes one optimizer step through
``PolicyUpdater``. After the steps ``rft_core.sync.schedule.trainer_syncs_after`` names it
publishes its weights to the synchronizer; every ``trainer.save_interval`` steps (0 = only at
the end) it writes a full checkpoint in the seed's tree and prunes to
``max_checkpoints_to_keep``. At end of data it saves a final checkpoint (HF weights unless
``save_hf_checkpoint: never``) and hands its final weights to the explorer's closing eval.
A job that trains on a dataset (SFT, DPO in ``train`` mode) has no explorer: its trainer runs
the held-out eval on the eval tasksets itself (``rft_core.trainer.held_out_eval``).
Each step sends the monitor its log-probs of the rollouts the explorer kept for the dashboard,
or (DPO) the pairs it kept itself (``rft_core.explorer.rollout_samples``).

``Trainer`` (the role, as Trinity names it) is a plain class: the launcher runs it as a Ray actor
that calls ``run``; ``rft_core.runtime.in_process`` drives the same steps (``start``,
``next_step``, ``finish``) in one process with an explorer (``colocate``, or without Ray). The
updates themselves are ``PolicyUpdater``'s (``rft_core.trainer.policy``), or, with
``trainer.world_size`` > 1, ``TrainerRanks``' (``rft_core.trainer.ranks``: the same interface
over data-parallel ranks).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import torch

from rft_core.actor_setup import RunActor
from rft_core.actors.actor_log import release_output, report_dropped
from rft_core.buffer import build_buffer
from rft_core.buffer.queue import replay_settings
from rft_core.checkpoint.layout import (
    read_trainer_meta,
    step_dir,
    write_trainer_meta,
)
from rft_core.checkpoint.retention import prune_as_configured
from rft_core.config import Config
from rft_core.config.expert_data import expert_buffer_config, expert_rows_per_step
from rft_core.config.presets import get_preset, mixes_expert_data
from rft_core.config.resources import trainer_world_size
from rft_core.config.stages import evaluates_in_trainer
from rft_core.data import load_sft_dataset
from rft_core.data.source import Rows
from rft_core.data.taskset import ExplorerTasksets
from rft_core.errors import ConfigError
from rft_core.explorer.rollout_samples import (
    keeps_step,
    mark_pairs,
    pair_samples,
    trainer_samples,
)
from rft_core.messages import experiences_from_messages
from rft_core.monitor.monitor import step_summary
from rft_core.sync.schedule import trainer_syncs_after
from rft_core.sync.synchronizer import WeightSender, sync_call
from rft_core.trainer.held_out_eval import HeldOutEval
from rft_core.trainer.policy import PolicyUpdater
from rft_core.trainer.ranks import TrainerRanks

log = logging.getLogger("rft_core.trainer")


class DatasetExperiences:
    """``train`` mode with sft/dpo: experiences from a dataset, ``train_batch_size`` a step,
    over ``total_epochs`` (or ``total_steps``), resumable at a step."""

    def __init__(
        self,
        experiences: list,
        batch_size: int,
        total_epochs: int,
        total_steps: int | None,
        start_step: int,
        path: str = "buffer.trainer_input.experience_buffer",
    ):
        if not experiences:
            raise ConfigError(f"{path}.path", "the training dataset is empty")
        self.experiences = experiences
        self.batch_size = batch_size
        steps_per_epoch = max(1, len(experiences) // batch_size)
        self.total_steps = (
            total_steps if total_steps is not None else steps_per_epoch * total_epochs
        )
        self.step = start_step

    def get(self, n: int, timeout: float | None = None) -> list:
        if self.step >= self.total_steps:
            return []
        start = self.step * self.batch_size
        batch = [self.experiences[(start + i) % len(self.experiences)] for i in range(n)]
        self.step += 1
        return batch

    def state(self) -> dict[str, Any]:
        return {"step": self.step, "offset": self.step * self.batch_size}


def checkpoint_buffer_state(job_dir: Any, resume_step: int | None) -> dict[str, Any] | None:
    """The experience buffer's reader position saved with the checkpoint of ``resume_step``."""
    if resume_step is None:
        return None
    meta = read_trainer_meta(job_dir) or {}
    if meta.get("latest_iteration") == resume_step:
        return meta.get("experience_buffer")
    return None


def drop_stale_experiences(cfg: Config, resume_step: int | None) -> int:
    """A resumed run's persistent experience buffer (``sql``, ``file``) written by its own
    explorer: remove the rows written after the checkpoint of ``resume_step`` (the resumed
    explorer makes those steps again), and reopen the stream an earlier run closed. Must run
    before the explorer writes; returns how many rows went."""
    eb = cfg.buffer.trainer_input.experience_buffer
    if eb.storage_type not in ("file", "sql"):
        return 0
    writer = build_buffer(
        eb.storage_type,
        name=eb.name,
        path=eb.path,
        job_dir=Path(cfg.job_dir),
        role="writer",
        between_jobs=False,
        replay=replay_settings(eb),
    )
    try:
        state = checkpoint_buffer_state(cfg.job_dir, resume_step)
        dropped = writer.drop_after(state) if state is not None else 0
    finally:
        writer.shutdown()
    if dropped:
        log.info(
            "experience buffer: %d experiences written after global_step_%d dropped "
            "(the resumed explorer makes them again)",
            dropped,
            resume_step,
        )
    return dropped


class Trainer(RunActor):
    """Policy updates, weight publishing and checkpoints for one job (stage)."""

    def __init__(
        self,
        cfg: Config,
        synchronizer: Any = None,
        role: str = "trainer",
        dataset_rows: Rows | None = None,
        experience_buffer: Any = None,
        logger_name: str = "rft_core",
        rank_placement: tuple[Any, list[int]] | None = None,
        tasksets: ExplorerTasksets | None = None,
        stale_experiences_dropped: bool = False,
    ):
        super().__init__(cfg, synchronizer, role, logger_name)
        self._tasksets = tasksets  # the eval tasksets an SFT/DPO job evaluates on (held_out_eval)
        self._eval: HeldOutEval | None = None
        self._rank_placement = rank_placement  # (placement group, bundle of ranks 1..W-1)
        self._dataset_rows = dataset_rows  # train mode's SFT/DPO file as the preflight read it
        self.saved_steps: list[int] = []
        self._checkpoint_s = 0.0  # the last save's seconds, until the next step reports them
        self.last_metrics: dict[str, float] = {}
        self.policy = None
        self._source = None
        self._sender = None
        self._experience_buffer = experience_buffer  # shared with an in-process explorer
        self._expert_source: DatasetExperiences | None = None  # mix, mix_chord
        self._last_saved: int | None = None
        self._trains_pairs = False  # DPO: the trainer keeps pairs for the rollout explorer
        # the driver dropped what the explorer wrote after the resume checkpoint already
        # (drop_stale_experiences): the explorer may be writing this run's rows by now
        self._stale_dropped = stale_experiences_dropped

    # -- setup -------------------------------------------------------------------------------

    def _build(self, model_path: str, resume_step: int | None) -> None:

        cfg = self.cfg
        self.device = (
            "cuda" if cfg.cluster.gpu_per_node > 0 and torch.cuda.is_available() else "cpu"
        )
        tr = cfg.trainer
        settings = dict(
            device=self.device,
            dtype=cfg.model.dtype,
            micro_batch_size=tr.micro_batch_size_per_gpu,
            grad_clip=tr.grad_clip
            if tr.grad_clip is not None
            else cfg.algorithm.optimizer.clip_grad,
            total_steps=self.total_steps_hint(),
            gradient_checkpointing=tr.gradient_checkpointing,
            temperature=self._rollout_temperature(),
            seed=cfg.explorer.rollout_model.seed,
            max_token_len=tr.max_token_len_per_gpu,
            critic_model_path=cfg.model.critic_model_path or None,
            loss_horizon=cfg.model.max_response_tokens,
            use_remove_padding=tr.use_remove_padding,
            use_torch_compile=tr.use_torch_compile,
            ppo_epochs=tr.ppo_epochs,
        )
        world_size = trainer_world_size(cfg)
        if world_size == 1:
            self.policy = PolicyUpdater(model_path, cfg.algorithm, **settings)
        else:
            self.policy = TrainerRanks(
                world_size,
                model_path,
                cfg.algorithm,
                name=self.role,
                log_dir=str(self.job_dir / "log"),
                placement=self._rank_placement,
                **settings,
            )
        if resume_step is not None:
            self.step = self.policy.load(self.job_dir, resume_step)
            log.info(
                "trainer resumed from global_step_%d (model, optimizer, lr schedule)", self.step
            )
        preset = get_preset(cfg.algorithm.algorithm_type)
        self._trains_pairs = preset.schema == "dpo"  # no explorer: the trainer keeps samples
        eb = cfg.buffer.trainer_input.experience_buffer
        # mode train with rollouts: the explorer is a separate ``mode: explore`` job
        beside_explore_job = cfg.mode == "train" and preset.use_rollout
        if not preset.use_rollout:
            self._source = self._dataset_source(preset.schema)
        else:

            def open_buffer(role: str) -> Any:
                return build_buffer(
                    eb.storage_type,
                    name=eb.name,
                    path=eb.path,
                    job_dir=self.job_dir,
                    role=role,
                    between_jobs=beside_explore_job,
                    replay=replay_settings(eb),
                )

            # a buffer that outlives the run (a train job's, a file or sql one) is read on
            # after the experiences the checkpoint trained on, not again from its start
            persistent = beside_explore_job or eb.storage_type in ("file", "sql")
            if persistent and not beside_explore_job and not self._stale_dropped:
                # this run's explorer writes it: reopen the stream an earlier run closed before
                # reading (the explorer may not have opened it yet); a resumed run's explorer
                # makes the experiences after the checkpoint again, so the old ones go. Only
                # where the explorer cannot have written yet (in one process, the trainer starts
                # first); on Ray the driver did it before it started the actors.
                drop_stale_experiences(cfg, resume_step)
            shared = self._experience_buffer  # an empty buffer is falsy (len 0)
            self._source = shared if shared is not None else open_buffer("reader")
            if persistent and resume_step is not None:
                self._resume_buffer_offset(resume_step)
            if beside_explore_job:
                log.info("trainer reading experiences from %s %r", eb.storage_type, eb.path)
        if mixes_expert_data(cfg.algorithm.algorithm_type):
            self._expert_source = self._expert_data_source()
        if self.synchronizer is not None or beside_explore_job:
            sync = cfg.synchronizer
            self._sender = WeightSender(
                self.synchronizer,
                sync.sync_method,
                str(self.job_dir),
                sync.sync_timeout,
                self.device,
            )

    def _checkpoint_buffer_state(self, resume_step: int | None) -> dict[str, Any] | None:
        """The experience buffer's reader position saved with the checkpoint of ``resume_step``."""
        return checkpoint_buffer_state(self.job_dir, resume_step)

    def _resume_buffer_offset(self, resume_step: int) -> None:
        """Skip the experiences the checkpoint of ``resume_step`` already trained on."""
        state = self._checkpoint_buffer_state(resume_step)
        if state is not None:
            self._source.load_state(state)
            log.info("experience buffer resumed at %s", state)

    def _rollout_temperature(self) -> float:
        # old log-probs were taken at the sampling temperature; the trainer scores the same way
        tasksets = self.cfg.buffer.explorer_input.all_tasksets  # `taskset` or `tasksets`
        t = tasksets[0].rollout_args.temperature if tasksets else None
        return float(t if t is not None else self.cfg.model.temperature)

    def total_steps_hint(self) -> int | None:
        """Trainer steps of the run when known up front (for the LR schedule)."""
        cfg = self.cfg
        return cfg.trainer.total_steps or cfg.buffer.total_steps

    def _dataset_source(self, schema: str) -> DatasetExperiences:
        cfg = self.cfg
        eb = cfg.buffer.trainer_input.experience_buffer
        rows = load_sft_dataset(eb, schema=schema, rows=self._dataset_rows)
        self._dataset_rows = None  # converted: the file's rows are no longer needed
        max_len = cfg.model.max_model_len or 2048
        experiences = experiences_from_messages(rows, self.policy.tokenizer, max_len)
        return DatasetExperiences(
            experiences,
            cfg.buffer.train_batch_size,
            cfg.buffer.total_epochs,
            cfg.buffer.total_steps,
            self.step,
        )

    def _expert_data_source(self) -> DatasetExperiences:
        """mix, mix_chord: the expert SFT dataset, ``expert_rows_per_step`` rows a step over its
        ``total_epochs`` / ``total_steps`` (``rft_core.config.expert_data``); resumed at the
        step the checkpoint reached, as the SFT trainer's dataset is."""

        cfg = self.cfg
        eb, passes = expert_buffer_config(cfg)
        rows = load_sft_dataset(eb, schema="sft")
        experiences = experiences_from_messages(
            rows, self.policy.tokenizer, cfg.model.max_model_len or 2048
        )
        for i, e in enumerate(experiences):
            # the RL loss's inputs, as Trinity's mix sampling fills them: reward and advantage
            # 0, old log-probs 0 (the SFT part reads none); a group of its own
            e.info["is_expert"] = True
            e.reward, e.advantage = 0.0, 0.0
            e.logprobs = [0.0] * len(e.response_ids)
            e.group_id = f"expert-{i}"
        per_step = expert_rows_per_step(cfg)
        log.info("expert data %s: %d rows, %d a step", eb.path, len(experiences), per_step)
        return DatasetExperiences(
            experiences,
            per_step,
            passes["total_epochs"],
            passes["total_steps"],
            self.step,
            path=eb._yaml_path,
        )

    @property
    def _expert_rows(self) -> int:
        """Expert rows in each step's batch (0 unless the algorithm mixes expert data)."""
        if self._expert_source is None:
            return 0
        return self._expert_source.batch_size

    # -- checkpoints -------------------------------------------------------------------------

    def save(self, save_hf: bool) -> None:
        start = time.perf_counter()
        self.monitor.phase("checkpoint", self.step)
        self.policy.save(self.job_dir, self.step, save_hf)
        removed = prune_as_configured(self.job_dir, self.cfg.trainer)
        self.saved_steps.append(self.step)
        self._write_meta(save_hf)
        path = step_dir(self.job_dir, self.step)
        self.monitor.checkpoint_saved(self.step, str(path))
        # reported with the next step's metrics (one metrics line a trainer step)
        self._checkpoint_s += time.perf_counter() - start
        log.info(
            "saved checkpoint %s (hf=%s) in %.1fs%s",
            path,
            save_hf,
            time.perf_counter() - start,
            f"; pruned global_step_{removed}" if removed else "",
        )

    def _final_lacks_hf(self) -> bool:
        """The last checkpoint (this run's, or the one a resumed run found) has no HF weights."""
        if self.saved_steps:
            return True  # this run saved it at an interval, without HF weights
        meta = read_trainer_meta(self.job_dir) or {}
        return meta.get("latest_iteration") == self.step and not meta.get("saved_hf", True)

    def _write_meta(self, saved_hf: bool) -> None:
        meta = {
            "latest_iteration": self.step,
            "saved_hf": saved_hf,
            "metrics": self.last_metrics,
            "experience_buffer": self._source.state(),
        }
        write_trainer_meta(self.job_dir, meta)

    # -- the loop ----------------------------------------------------------------------------

    def train_step(self, experiences: list, waited: float | None = None) -> dict[str, float]:
        """One optimizer step; ``waited``: the seconds its batch was waited for
        (``time/waiting``)."""
        start = time.perf_counter()
        mon = self.cfg.monitor
        keeps_pairs = self._trains_pairs and keeps_step(self.step + 1, mon.rollout_samples_interval)
        if keeps_pairs:
            experiences = mark_pairs(experiences, mon.rollout_samples_per_step)
        metrics = dict(self.policy.train_step(experiences))
        self.step += 1
        metrics["time/train_step"] = time.perf_counter() - start
        if waited is not None:
            metrics["time/waiting"] = waited
        if self._checkpoint_s:  # the checkpoint saved after the step before
            metrics["time/checkpoint"], self._checkpoint_s = self._checkpoint_s, 0.0
        sync = self.cfg.synchronizer
        if self._sender is not None and trainer_syncs_after(self.step, sync.sync_interval):
            t0 = time.perf_counter()
            self._sender.send(self.step, self._weights_for_sync())
            metrics["time/sync_weight"] = time.perf_counter() - t0
        self.last_metrics = {k: float(v) for k, v in metrics.items()}
        self.monitor.log(metrics, self.step)
        log.info("trainer step %d: %s", self.step, step_summary(self.last_metrics))
        # the trainer's log-probs of the rollouts the explorer kept, beside their tokens; DPO:
        # the pairs it kept itself, as rollouts of its own
        samples = trainer_samples(experiences, self.step)
        if keeps_pairs:
            samples += pair_samples(
                experiences,
                self.step,
                tokenizer=self.policy.tokenizer,
                token_logprobs=mon.rollout_token_logprobs,
            )
        self.monitor.samples(samples, self.step)
        return metrics

    def progress(self) -> dict[str, Any]:
        return {"step": self.step}

    def run(self, model_path: str | None = None, resume_step: int | None = None) -> dict[str, Any]:
        """Train until the data ends (explorer closed the buffer and it is drained, or the
        dataset's epochs/steps are done) or ``trainer.total_steps``. Returns a summary."""
        try:
            self.start(model_path, resume_step)
            while self.next_step() is not None:
                pass
            return self.finish()
        except BaseException as err:
            self.failed(err)
            raise

    def start(self, model_path: str | None = None, resume_step: int | None = None) -> None:
        """Build the policy (from the checkpoint of ``resume_step`` when given), the experience
        source and the weight sender."""
        self.monitor.status("running", f"{self.role} started")
        self._build(model_path or self.cfg.model.model_path, resume_step)
        self._last_saved = self.step if resume_step is not None else None
        if evaluates_in_trainer(self.cfg):  # SFT/DPO in mode train: no explorer evaluates
            ends = [n for n in (self.step_limit, getattr(self._source, "total_steps", None)) if n]
            total = min(ends) if ends else None
            self._eval = HeldOutEval(self.cfg, self.monitor, total, self._tasksets, self.device)
            if self.cfg.explorer.eval_on_startup and self.step == 0:
                self._eval.evaluate(self.policy, 0)

    @property
    def step_limit(self) -> int | None:
        return self.cfg.trainer.total_steps or self.cfg.buffer.total_steps

    def can_step(self) -> bool:
        """The next ``next_step`` will not wait: its batch is in the buffer (or the data is a
        dataset, or the step limit is reached)."""
        qsize = getattr(self._source, "qsize", None)
        limit = self.step_limit
        if qsize is None or (limit is not None and self.step >= limit):
            return True
        return qsize() >= self.cfg.buffer.train_batch_size - self._expert_rows

    def next_step(self) -> dict[str, float] | None:
        """Read one batch, train on it (publishing weights when the schedule says), checkpoint
        at ``save_interval``. None at the end of the data or at the step limit."""
        tr = self.cfg.trainer
        limit = self.step_limit
        if limit is not None and self.step >= limit:
            return None
        timeout = self.cfg.buffer.trainer_input.experience_buffer.max_read_timeout
        rollouts = self.cfg.buffer.train_batch_size - self._expert_rows
        waited = time.perf_counter()
        if not self.can_step():
            self.monitor.phase("waiting", self.step + 1)  # for the explorer's experiences
        experiences = self._source.get(rollouts, timeout=timeout)
        waited = time.perf_counter() - waited  # time/waiting: for the explorer's experiences
        if not experiences:
            return None
        if self._expert_source is not None:
            # mix, mix_chord: the step's expert rows after its rollouts; used up, the run ends
            expert = self._expert_source.get(self._expert_rows)
            if not expert:
                log.info("expert data used up after %d steps: training ends", self.step)
                return None
            experiences = list(experiences) + expert
        self.monitor.phase("train", self.step + 1)
        metrics = self.train_step(experiences, waited=waited)
        if self._eval is not None and self._eval.due(self.step):
            self._eval.evaluate(self.policy, self.step)  # before the checkpoint it measured
        if tr.save_interval and self.step % tr.save_interval == 0:
            self.save(save_hf=tr.save_hf_checkpoint == "always")
            self._last_saved = self.step
        return metrics

    def finish(self) -> dict[str, Any]:
        """The last held-out eval (SFT/DPO), the final checkpoint (HF weights unless
        ``save_hf_checkpoint: never``), the final weights for the explorer's closing eval, the ``finished`` status. Returns the summary."""
        tr = self.cfg.trainer
        if self._eval is not None and self.last_metrics and self._eval.last_step != self.step:
            self._eval.evaluate(self.policy, self.step)  # the trained weights, once
        if self.step > 0 and self._last_saved != self.step:
            self.save(save_hf=tr.save_hf_checkpoint != "never")
        elif self.step > 0 and tr.save_hf_checkpoint == "last" and self._final_lacks_hf():
            # the last interval checkpoint is the final one: add its HF weights only
            self.policy.add_hf_weights(self.job_dir, self.step)
            self._write_meta(saved_hf=True)
            log.info("added Hugging Face weights to global_step_%d", self.step)
        if self._sender is not None:
            self._sender.send_final(self.step, self._weights_for_sync())
        self._close_ranks()
        report_dropped(self.role)
        self.monitor.status("finished", f"{self.role} finished at step {self.step}")
        return self.summary()

    def failed(self, err: BaseException) -> None:
        report_dropped(self.role)
        self.monitor.status("failed", f"{self.role}: {err}")
        log.exception("%s failed", self.role)
        if self.synchronizer is not None:
            sync_call(self.synchronizer, "trainer_failed", f"{type(err).__name__}: {err}")

    def _weights_for_sync(self) -> dict[str, torch.Tensor]:
        """What the sender hands over: memory sync in one process with a single unsharded
        policy, the parameters themselves (the engine copies them at once, on their device);
        else the policy's full CPU copy."""
        model = getattr(self.policy, "model", None)
        in_memory = self._sender.in_process and self._sender.sync_method == "memory"
        if in_memory and model is not None and not self.policy.sharded:
            return {k: v.detach() for k, v in model.state_dict().items()}
        return self.policy.state_dict_for_sync()

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.step,
            "saved_steps": list(self.saved_steps),
            "metrics": self.last_metrics,
        }

    def _close_ranks(self) -> None:
        # the ranks of a TrainerRanks leave their process group (an exiting actor's die with it)
        if hasattr(self.policy, "close"):
            self.policy.close()
            self.policy = None

    def close(self) -> None:
        self._close_ranks()
        release_output(self.role)  # its last captured line and the dropped count, then the monitor
        self.monitor.close()
