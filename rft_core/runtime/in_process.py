"""An explorer and a trainer in one process, driven step by step: ``mode: colocate`` (one GPU,
inside one Ray actor) and any run or benchmark on a machine without Ray.

    run = InProcessRun(cfg)               # cfg: a loaded Config (mode colocate or both)
    run.start()                           # or run.start(resume_step=N)
    while (report := run.step()) is not None:
        ...                               # one explorer step and the trainer steps it feeds
    summaries = run.finish()              # {"explorer": ..., "trainer": ...}
    # or all of it: summaries = run.run()
    # with the run's log lines of a `trinity run` (rft_core.runtime.run_log):
    with StageLog(cfg) as stage_log:
        summaries = run.run(stage_log=stage_log)

It reuses ``Explorer`` and ``Trainer`` (their ``start`` / ``next_step`` / ``finish``), one
experience buffer object that both hold (an in-process queue for ``storage_type: queue``), and
an ``InProcessSynchronizer`` with the Ray synchronizer's bookkeeping, so the weight versions,
checkpoints, resume, evals and monitor events are those of a two-actor run. Nothing here
imports Ray.

One ``step``: the weight hand-off the schedule made due (``rft_core.sync.schedule``: the
trainer's parameters go straight to ``engine.load_weights``, on their device), the explorer's
step, then the engine's KV memory released (``engine.release_memory`` where the engine has
it), the optimizer state brought back (``trainer.optimizer_offload``), the trainer steps that
the explorer's step made due (the trainer stays ``sync_offset`` steps behind, as in Trinity),
and the optimizer state offloaded again for the next generation. On CUDA each step reports
its peak memory (``memory/peak_allocated_gb``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from rft_core.actors.actor_log import activate
from rft_core.buffer.queue import QueueBuffer, replay_settings
from rft_core.checkpoint.layout import actor_dir, step_dir
from rft_core.config import Config
from rft_core.errors import ConfigError
from rft_core.explorer.explorer import Explorer
from rft_core.runtime.run_log import StageLog
from rft_core.sync.schedule import explorer_resume_step
from rft_core.sync.synchronizer import InProcessSynchronizer
from rft_core.trainer.trainer import Trainer

log = logging.getLogger("rft_core.in_process")

IN_PROCESS_SYNC_METHODS = ("memory", "checkpoint")
TRAINER_LOGGER = "rft_core.trainer"  # the trainer's log lines; the explorer's log has the rest


def resume_point(cfg: Config, resume_step: int | None) -> tuple[int, str | None]:
    """(explorer step to restart after, weights directory for its engine) for a run with
    explorer and trainer in one job resuming from the trainer's ``resume_step`` (None: fresh)."""
    first = explorer_resume_step(
        resume_step, cfg.buffer.batch_size, cfg.algorithm.repeat_times, cfg.buffer.train_batch_size
    )
    if resume_step is None:
        return first, None
    return first, str(actor_dir(step_dir(Path(cfg.job_dir), resume_step)))


def _shared_buffer(cfg: Config) -> Any:
    """The one experience buffer object the explorer writes and the trainer reads: an
    in-process queue (mirrored to ``path``) for ``storage_type: queue``; None for file/sql
    buffers, which each side opens as usual (they meet on disk)."""
    eb = cfg.buffer.trainer_input.experience_buffer
    if eb is None or (eb.storage_type or "queue").lower() != "queue":
        return None

    return QueueBuffer(
        name=eb.name,
        path=eb.path,
        job_dir=Path(cfg.job_dir),
        in_process=True,
        replay=replay_settings(eb),
    )


class InProcessRun:
    """An ``Explorer`` and a ``Trainer`` of one job (stage) in this process (module docstring).

    ``tasksets`` / ``dataset_rows``: what the launcher's preflight read (else each side reads
    its own)."""

    def __init__(self, cfg: Config, tasksets: Any = None, dataset_rows: Any = None):
        sync = cfg.synchronizer
        if sync.sync_method not in IN_PROCESS_SYNC_METHODS:
            raise ConfigError(
                "synchronizer.sync_method",
                f"{sync.sync_method!r} needs the explorer and the trainer in two processes; "
                "in one (mode colocate, or a run without Ray) use memory or checkpoint",
                value=sync.sync_method,
                allowed=list(IN_PROCESS_SYNC_METHODS),
            )
        self.cfg = cfg
        job_dir = Path(cfg.job_dir)
        for sub in ("buffer", "log", "monitor"):
            (job_dir / sub).mkdir(parents=True, exist_ok=True)
        self.synchronizer = InProcessSynchronizer(
            sync.sync_method, sync.sync_timeout, str(job_dir / "log" / "synchronizer.log")
        )
        buffer = _shared_buffer(cfg)
        self.trainer = Trainer(
            cfg,
            self.synchronizer,
            dataset_rows=dataset_rows,
            experience_buffer=buffer,
            logger_name=TRAINER_LOGGER,
        )
        self.explorer = Explorer(
            cfg,
            self.synchronizer,
            tasksets=tasksets,
            experience_buffer=buffer,
            exclude_logger=TRAINER_LOGGER,
        )
        self.offload_optimizer = bool(cfg.trainer.optimizer_offload)
        self.cuda = False
        self._trainer_done = False
        self._offloaded = False
        self._active = self.trainer  # the side a failure comes from

    @property
    def _active(self) -> Explorer | Trainer:
        return self._running

    @_active.setter
    def _active(self, side: Explorer | Trainer) -> None:
        # the side that runs gets what the process prints (``rft_core.actors.actor_log``)
        self._running = side
        activate(side.role)

    # -- the parts ---------------------------------------------------------------------------

    @property
    def engine(self) -> Any:
        """The explorer's rollout engine (built by ``start``)."""
        return self.explorer._engine

    def start(self, resume_step: int | None = None) -> None:
        """Build the trainer (from its checkpoint of ``resume_step`` when given), then the
        explorer's engine (from the same weights), as a two-actor run resumes."""
        first, weights = resume_point(self.cfg, resume_step)
        self._active = self.trainer
        self.trainer.start(None, resume_step)
        self.cuda = self.trainer.device.startswith("cuda")
        self._active = self.explorer
        self.explorer.start(first, resume_step or 0, weights)
        log.info(
            "explorer and trainer in one process (%s sync, %s)",
            self.cfg.synchronizer.sync_method,
            self.trainer.device,
        )
        self._reset_peak_memory()

    def step(self) -> dict[str, float] | None:
        """One explorer step (after the hand-off the schedule made due) and the trainer steps
        it makes due. Returns the explorer's metrics, the last trainer step's metrics, the
        hand-off's ``time/sync_weight`` (the trainer's publish + the engine's load, when one
        happened before this step), ``explorer/step``, ``trainer/step`` and, on CUDA,
        ``memory/peak_allocated_gb``; None at the end of the data."""
        sync_due = self.explorer.sync_due
        publish_s = self.trainer.last_metrics.get("time/sync_weight", 0.0)
        self._active = self.explorer
        metrics = self.explorer.next_step()
        if metrics is None:
            return None
        report = dict(metrics)
        self._release_engine_memory()
        self._offload(False)
        lag = self.cfg.synchronizer.sync_offset
        while self.trainer.step < self.explorer.step - lag and self.trainer.can_step():
            trained = self._trainer_step()
            if trained is None:
                break
            # the trainer's publish time is half of the next step's hand-off, reported there
            report.update({k: v for k, v in trained.items() if k != "time/sync_weight"})
        self._offload(True)  # until the trainer's next step
        if sync_due:
            report["time/sync_weight"] = publish_s + (self.explorer.last_sync_s or 0.0)
        report["explorer/step"] = float(self.explorer.step)
        report["trainer/step"] = float(self.trainer.step)
        if self.cuda:
            peak = torch.cuda.max_memory_allocated() / 2**30
            report["memory/peak_allocated_gb"] = peak
            self.explorer.monitor.log({"memory/peak_allocated_gb": peak}, self.explorer.step)
            self._reset_peak_memory()
        return report

    def finish(self) -> dict[str, Any]:
        """End of the data: the explorer closes the buffer, the trainer drains it and saves its
        final checkpoint, the explorer runs its closing eval on the final weights. Returns
        ``{"explorer": summary, "trainer": summary}``."""
        self._active = self.explorer
        self.explorer.end_of_data()
        self._offload(False)
        while self._trainer_step() is not None:
            pass
        if not self._trainer_done:
            self._finish_trainer()
        self._active = self.explorer
        self.explorer.finish()
        return {"explorer": self.explorer.summary(), "trainer": self.trainer.summary()}

    def run(
        self, resume_step: int | None = None, stage_log: StageLog | None = None
    ) -> dict[str, Any]:
        """``start``, every ``step``, ``finish``; a failure is reported by the side it came
        from (status ``failed``, its log) and raised. ``stage_log``: polled after each step (a
        run without Ray; on Ray the driver polls its own: ``rft_core.runtime.stage``)."""
        poll = stage_log.poll if stage_log is not None else lambda: None
        try:
            self.start(resume_step)
            poll()
            while self.step() is not None:
                poll()
            return self.finish()
        except BaseException as err:
            self._failed(err)
            raise
        finally:
            self.close()

    def progress(self) -> dict[str, Any]:
        return self.explorer.progress()

    def close(self) -> None:
        """Release the engine (a pool's actors), flush both monitors, close the synchronizer's
        event loop."""
        self.explorer.close_engine()
        self.explorer.close()
        self.trainer.close()
        self.synchronizer.close()

    # -- helpers -----------------------------------------------------------------------------

    def _trainer_step(self) -> dict[str, float] | None:
        if self._trainer_done:
            return None
        self._active = self.trainer
        metrics = self.trainer.next_step()
        if metrics is None:  # step limit reached before the explorer's end
            self._finish_trainer()
        return metrics

    def _finish_trainer(self) -> None:
        self._active = self.trainer
        self.trainer.finish()
        self._trainer_done = True

    def _failed(self, err: BaseException) -> None:
        """The side that was running reports it (status ``failed``, its log), as its actor
        would; the other side stops with the run."""
        self._active.failed(err)

    def _release_engine_memory(self) -> None:
        """The engine's KV cache buffers go while the trainer steps (a no-op for an engine
        without ``release_memory`` or without buffers)."""
        release = getattr(self.engine, "release_memory", None)
        if release is not None:
            release()

    def _offload(self, offload: bool) -> None:
        """``trainer.optimizer_offload``: the optimizer state to the CPU while the engine
        generates (``offload=True``), back before the trainer steps."""
        if not self.offload_optimizer or self._trainer_done or offload == self._offloaded:
            return
        policy = self.trainer.policy
        move = getattr(policy, "offload_optimizer" if offload else "reload_optimizer", None)
        if move is None:
            return  # a policy without the methods keeps its optimizer state where it is
        move()
        self._offloaded = offload

    def _reset_peak_memory(self) -> None:
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()


__all__ = ["InProcessRun", "resume_point"]
