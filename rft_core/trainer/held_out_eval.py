"""The held-out eval of a job that trains on a dataset (SFT or DPO in ``mode: train``).

Such a job has no explorer, so its trainer evaluates on ``buffer.explorer_input.eval_tasksets``
itself (an SFT stage keeps the run's global ones: ``rft_core.config.stages``): at step 0 with
``explorer.eval_on_startup``, every ``trainer.sft_eval_interval`` trainer steps and after the
last, each before that step's checkpoint is saved (``trainer.best_checkpoint_metric`` can pick
it). The eval is the explorer's (``rft_core.workflows.evaluation.evaluate_tasksets``: the same
workflows, rollout args and ``eval/<taskset>/accuracy/mean@k`` metrics), logged at the trainer's
step. It generates with an hf engine over the trainer's own model, so no weights are copied; a
policy over several ranks hands its full weights to an engine of its own instead.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

from rft_core.config import Config
from rft_core.data.taskset import ExplorerTasksets, read_explorer_tasksets
from rft_core.monitor.monitor import step_summary
from rft_core.rollout import engine_settings
from rft_core.rollout.hf import HFRolloutEngine
from rft_core.workflows.evaluation import evaluate_tasksets

log = logging.getLogger("rft_core.trainer")

DEFAULT_MAX_EVALS = 3  # sft_eval_interval None: at most this many evals after step 0


def sft_eval_interval(cfg: Config, total_steps: int | None) -> int:
    """Trainer steps between two evals (0: none): ``trainer.sft_eval_interval``, or
    ``explorer.eval_interval`` widened so that a stage of ``total_steps`` evaluates at most
    ``DEFAULT_MAX_EVALS`` times (an SFT step is much cheaper than an eval)."""
    if cfg.trainer.sft_eval_interval is not None:
        return cfg.trainer.sft_eval_interval
    interval = cfg.explorer.eval_interval
    if total_steps:
        interval = max(interval, math.ceil(total_steps / DEFAULT_MAX_EVALS))
    return interval


class HeldOutEval:
    """The eval schedule and engine of one trainer (module docstring)."""

    def __init__(
        self,
        cfg: Config,
        monitor: Any,
        total_steps: int | None,
        tasksets: ExplorerTasksets | None,
        device: str,
    ):
        self.cfg = cfg
        self.device = device  # the trainer's (an engine of its own goes there)
        self.monitor = monitor
        self.interval = sft_eval_interval(cfg, total_steps)
        self._tasksets = tasksets  # as the launcher's preflight read them (None: read here)
        self._engine: HFRolloutEngine | None = None
        self.last_step: int | None = None  # the step of the latest eval

    def due(self, step: int) -> bool:
        """An eval is due after trainer step ``step`` (``finish`` adds the last one)."""
        return self.interval > 0 and step % self.interval == 0 and self.last_step != step

    def evaluate(self, policy: Any, step: int) -> dict[str, float]:
        """The held-out metrics of ``policy``'s current weights, logged at ``step``."""
        start = time.perf_counter()
        self.monitor.phase("eval", step)
        if self._tasksets is None:
            self._tasksets = read_explorer_tasksets(self.cfg.buffer.explorer_input)
        trained = getattr(policy, "model", None)
        # read before the engine is built: building it puts the model it is given in eval mode
        was_training = trained.training if trained is not None else False
        engine = self._engine_of(policy, step)
        engine.model.eval()  # no dropout while generating
        try:
            metrics = evaluate_tasksets(self._tasksets.evals, engine)
        finally:
            if trained is not None:
                trained.train(was_training)  # the trainer's model trains on as it did
        metrics["time/eval"] = time.perf_counter() - start
        self.monitor.log(metrics, step)
        self.last_step = step
        log.info("eval at trainer step %d: %s", step, step_summary(metrics))
        return metrics

    def _engine_of(self, policy: Any, step: int) -> HFRolloutEngine:
        """An hf engine over the policy's model (its weights as they are now); a policy without
        one model in this process (several ranks) loads its full weights into an engine."""
        model = getattr(policy, "model", None)
        own = model is not None and not getattr(policy, "sharded", False)
        if self._engine is None:
            settings = engine_settings(self.cfg)
            settings["static_cache"] = False  # no CUDA graphs over the model being trained
            settings["device"] = self.device
            if own:
                param = next(model.parameters())
                settings.update(
                    model=model, tokenizer=policy.tokenizer, dtype=param.dtype, device=param.device
                )
            self._engine = HFRolloutEngine(self.cfg.model.model_path, **settings)
        if not own:
            self._engine.load_weights(policy.state_dict_for_sync(), step)
        self._engine.model_version = step
        return self._engine
