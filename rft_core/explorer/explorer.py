"""The explorer: turns tasks into experiences with the current policy.

One explorer step reads ``buffer.batch_size`` tasks, runs their workflows in one batched engine
call (``repeat_times`` samples per task), computes group advantages with the algorithm's
advantage fn (Trinity's experience pipeline), and puts the experiences into the trainer's
buffer. At the steps ``rft_core.sync.schedule`` names it loads new weights; every
``eval_interval`` steps (and at step 0 with ``eval_on_startup``) it evaluates on every eval
taskset, after that step's weight sync (with ``sync_offset`` 0 the eval logged at step S
measures the weights ``global_step_S`` holds; ``explorer/eval_model_version`` says which it
measured), then checkpoint retention prunes again with the best re-decided
(``rft_core.checkpoint.retention``). ``explorer_meta.json`` in the job dir records the step, the
taskset offset and the model version so a rerun resumes where it stopped. Each step kept by ``monitor.rollout_samples_interval``
also sends the monitor a ``samples`` event: its first ``monitor.rollout_samples_per_step``
rollouts, whole task groups, with rewards, advantages and token log-probs
(``rft_core.explorer.rollout_samples``).

``Explorer`` is a plain class: the launcher runs it as a Ray actor (``ray.remote(Explorer)``)
that calls ``run``; ``rft_core.runtime.in_process`` drives the same steps (``start``, ``next_step``,
``end_of_data``, ``finish``) in one process with a trainer (``colocate``, or without Ray).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch

from rft_core import workflows
from rft_core.actor_setup import RunActor
from rft_core.actors.actor_log import release_output, report_dropped
from rft_core.algorithms.advantages import get_advantage_fn
from rft_core.algorithms.settings import AlgorithmSettings, accepted_args
from rft_core.algorithms.turn_advantages import turns_of
from rft_core.buffer import build_buffer
from rft_core.buffer.queue import replay_settings
from rft_core.checkpoint.layout import actor_dir, full_checkpoints, write_explorer_meta
from rft_core.checkpoint.retention import prune_as_configured
from rft_core.checkpoint.store import load_state_dict
from rft_core.config import Config
from rft_core.config.presets import STEP_WISE_ADVANTAGE_FNS
from rft_core.data import TasksetReader
from rft_core.data.task import Task
from rft_core.data.taskset import ExplorerTasksets, read_explorer_tasksets
from rft_core.experience import Experience
from rft_core.explorer.rollout_samples import keeps_step, rollout_samples
from rft_core.monitor.monitor import step_summary
from rft_core.rollout import auxiliary_engine_settings, build_engine, engine_settings
from rft_core.rollout.base import AuxiliaryModel, SamplingParams
from rft_core.rollout.openai_server import stop_endpoint
from rft_core.rollout.pool import EnginePool, engine_pool_name
from rft_core.sync.checkpoint_watch import CheckpointWatch
from rft_core.sync.schedule import explorer_syncs_after, trainer_version_for_explorer_sync
from rft_core.sync.synchronizer import WeightReceiver
from rft_core.workflows.evaluation import evaluate_tasksets, run_workflows

log = logging.getLogger("rft_core.explorer")


def group_reward_stats(experiences: list[Experience]) -> dict[str, float]:
    """``experience_pipeline/group_advantages/...``: per-group reward mean and std, averaged."""
    groups: dict[str, list[float]] = defaultdict(list)
    for exp in experiences:
        groups[exp.group_id].append(exp.reward)
    if not groups:
        return {}
    means = [statistics.fmean(r) for r in groups.values()]
    stds = [statistics.stdev(r) if len(r) > 1 else 0.0 for r in groups.values()]
    prefix = "experience_pipeline/group_advantages"
    return {
        f"{prefix}/reward_mean/mean": statistics.fmean(means),
        f"{prefix}/reward_std/mean": statistics.fmean(stds),
        f"{prefix}/zero_std_group_ratio": sum(s == 0.0 for s in stds) / len(stds),
    }


def apply_group_advantages(
    experiences: list[Experience],
    advantage_fn: Any,
    advantage_fn_args: dict[str, Any],
    *,
    keep_filtered: bool = False,
) -> list[Experience]:
    """Fill ``Experience.advantage`` from a group-level advantage fn and drop the experiences
    whose group it filters out (e.g. GRPO's ``std_threshold``). ``keep_filtered``: keep them
    instead with every token masked (advantage 0, trained on by nobody), so that a trainer
    waiting for this step's batch_size x repeat_times experiences gets them all (mode both)."""
    if not experiences:
        return experiences
    rewards = torch.tensor([e.reward for e in experiences], dtype=torch.float32)

    advantages, keep = advantage_fn.group(
        rewards,
        [e.group_id for e in experiences],
        turns=turns_of(experiences),
        **advantage_fn_args,
    )
    kept = []
    for exp, adv, k in zip(experiences, advantages.tolist(), keep.tolist(), strict=True):
        if k:
            exp.advantage = float(adv)
            kept.append(exp)
        elif keep_filtered:
            exp.advantage = 0.0
            exp.action_mask = [0] * len(exp.response_ids)
            kept.append(exp)
    return kept


class Explorer(RunActor):
    """Rollouts, advantages and evaluation for one job (stage)."""

    def __init__(
        self,
        cfg: Config,
        synchronizer: Any = None,
        role: str = "explorer",
        tasksets: ExplorerTasksets | None = None,
        experience_buffer: Any = None,
        logger_name: str = "rft_core",
        exclude_logger: str | None = None,
    ):
        super().__init__(cfg, synchronizer, role, logger_name, exclude_logger)
        self._tasksets = tasksets  # as the launcher's preflight read them (None: read here)
        self.model_versions: list[tuple[int, int]] = []  # (explorer step, model version)
        self.eval_results: dict[int, dict[str, float]] = {}
        self._progress = {"step": 0, "total": None}
        self._engine = None
        self._auxiliary_models: list[Any] = []  # rft_core.rollout.base.AuxiliaryModel
        self._reader = None
        self._buffer = None
        self._receiver = None
        self._watch = None  # mode explore: weights the separate train job publishes
        self._experience_buffer = experience_buffer  # shared with an in-process trainer
        self._pending_sync = self._pending_eval = False
        self.last_sync_s: float | None = None  # the latest weight load's seconds
        self._timings: dict[str, float] = {}  # the workflows' seconds per part, this step

    # -- setup -------------------------------------------------------------------------------

    def _build_engine(self) -> str:
        """The rollout engine of ``explorer.rollout_model``; returns the device it runs on."""
        cfg = self.cfg
        rm = cfg.explorer.rollout_model
        device = "cuda" if cfg.cluster.gpu_per_node > 0 and torch.cuda.is_available() else "cpu"
        kwargs = engine_settings(cfg)  # dtype, seed, max_model_len, vLLM settings, template
        if rm.engine_num > 1:  # engines in their own Ray actors; see rft_core/rollout/pool.py
            self.close_engine()
            gpu = cfg.cluster.gpu_per_node > 0
            self._engine = EnginePool(
                rm.engine_type,
                cfg.model.model_path,
                engine_num=rm.engine_num,
                tensor_parallel_size=rm.tensor_parallel_size,
                use_gpu=gpu,
                node_num=cfg.cluster.node_num,
                name=engine_pool_name(self.job_dir),
                log_dir=str(self.job_dir / "log"),
                device="cuda" if gpu else "cpu",
                **kwargs,
            )
            return device
        self._engine = build_engine(
            rm.engine_type,
            cfg.model.model_path,
            device=device,
            tensor_parallel_size=rm.tensor_parallel_size,
            **kwargs,
        )
        return device

    def _build_auxiliary_models(self, device: str) -> None:
        """One engine per ``explorer.auxiliary_models`` entry (judges, reward models), on the
        policy engine's device; they keep their own weights (no sync)."""

        cfg = self.cfg
        self._auxiliary_models = []
        for aux in cfg.explorer.auxiliary_models:
            engine = build_engine(
                aux.engine_type,
                aux.model_path,
                device=device,
                tensor_parallel_size=aux.tensor_parallel_size,
                **auxiliary_engine_settings(aux),
            )
            sampling = SamplingParams(
                temperature=0.0 if aux.temperature is None else aux.temperature,
                top_p=1.0 if aux.top_p is None else aux.top_p,
                top_k=-1 if aux.top_k is None else aux.top_k,
                max_tokens=aux.max_response_tokens or cfg.model.max_response_tokens or 64,
                seed=aux.seed,
            )
            self._auxiliary_models.append(AuxiliaryModel(engine, sampling, aux.model_path))
        if self._auxiliary_models:
            log.info(
                "auxiliary models: %s", ", ".join(m.model_path for m in self._auxiliary_models)
            )

    def close_engine(self) -> None:
        """Stop the OpenAI endpoint an agent workflow started on the engine, if any, and
        release an engine pool's actors and placement group (no-op for one engine)."""
        if self._engine is not None:
            stop_endpoint(self._engine)
        close = getattr(self._engine, "close", None)
        if close is not None:
            close()

    def _build(self, start_step: int, start_version: int, weights_from: str | None) -> None:

        cfg = self.cfg
        device = self._build_engine()
        # the name the OpenAI endpoint serves the policy under (agent workflows)
        self._engine.served_model_name = cfg.explorer.rollout_model.name or cfg.model.model_path
        self._build_auxiliary_models(device)
        if weights_from is not None:
            self._engine.load_weights(load_state_dict(Path(weights_from)), start_version)
        self._engine.model_version = start_version
        buf = cfg.buffer
        self._reader = TasksetReader(
            self.tasksets().training_tasks(),
            batch_size=buf.batch_size,
            total_epochs=buf.total_epochs,
            total_steps=buf.total_steps,
            start_index=start_step * buf.batch_size,
        )
        if cfg.mode != "bench":
            eb = buf.trainer_input.experience_buffer
            shared = self._experience_buffer  # an empty buffer is falsy (len 0)
            self._buffer = (
                shared
                if shared is not None
                else build_buffer(
                    eb.storage_type,
                    name=eb.name,
                    path=eb.path,
                    job_dir=self.job_dir,
                    role="writer",
                    between_jobs=cfg.mode == "explore",
                    replay=replay_settings(eb),
                )
            )
        if self.synchronizer is not None:
            self._receiver = WeightReceiver(
                self.synchronizer,
                cfg.synchronizer.sync_method,
                str(self.job_dir),
                cfg.synchronizer.sync_timeout,
                device,
            )
        elif cfg.mode == "explore":
            self._watch = CheckpointWatch(self.job_dir)
        self.step = start_step
        if self._watch is not None:
            self.load_published_weights()  # a rerun starts from the train job's newest weights

    def tasksets(self) -> ExplorerTasksets:
        """Every taskset this explorer reads, read once: handed over by the launcher, else read
        at first use (an explorer started outside ``run_experiment``)."""
        if self._tasksets is None:
            self._tasksets = read_explorer_tasksets(self.cfg.buffer.explorer_input)
        return self._tasksets

    # -- one step ----------------------------------------------------------------------------

    def _run_workflows(
        self, tasks: list[Task], repeat_times: int, *, step_wise: bool = False
    ) -> list[Experience]:
        """Every task's experiences on the rollout engine (``workflows.evaluation``)."""
        return run_workflows(
            tasks,
            self._engine,
            repeat_times,
            auxiliary_models=self._auxiliary_models,
            step_wise=step_wise,
            timings=self._timings,
        )

    def _advantage_args(self, fn: Any, args: Any) -> dict[str, Any]:
        """``algorithm.advantage_fn_args`` that ``fn`` takes (the rest warned about once)."""
        if getattr(self, "_accepted_advantage_args", None) is None:
            path = "algorithm.advantage_fn_args"
            self._accepted_advantage_args = accepted_args(fn, dict(args or {}), path)
        return self._accepted_advantage_args

    def explore_step(self, tasks: list[Task]) -> dict[str, float]:

        algo = self.cfg.algorithm
        step = self.step + 1
        self.monitor.phase("rollout", step)
        version = self._engine.model_version
        start = time.perf_counter()
        self._timings = {}  # time/rollout and time/reward of this step's workflows
        step_wise = algo.advantage_fn in STEP_WISE_ADVANTAGE_FNS
        experiences = self._run_workflows(tasks, algo.repeat_times, step_wise=step_wise)
        metrics = {f"time/{part}": seconds for part, seconds in self._timings.items()}
        self._last_rewards: dict[int, list[float]] = defaultdict(list)
        for exp in experiences:  # the task selector's feedback (rft_core.data.selectors)
            episode_end = exp.info.get("last_turn", True)  # a step-wise episode counts once
            if episode_end and "task_index" in exp.info and exp.reward is not None:
                self._last_rewards[int(exp.info["task_index"])].append(float(exp.reward))
        for exp in experiences:
            exp.group_id = f"{step}/{exp.group_id}"  # unique across steps
            exp.explorer_step = step
            exp.model_version = version
        # rollout metrics per episode: a step-wise episode's last turn stands for it
        episodes = [e for e in experiences if e.info.get("last_turn", True)]
        metrics.update(workflows.rollout_metrics(episodes))
        metrics.update(group_reward_stats(episodes))
        if algo.advantage_fn:
            fn = get_advantage_fn(algo.advantage_fn)
            if AlgorithmSettings.resolve(algo).advantages_in_explorer:  # else the trainer's
                # a trainer of this job waits for the whole step: filtered groups stay, masked
                experiences = apply_group_advantages(
                    experiences,
                    fn,
                    self._advantage_args(fn.fn, algo.advantage_fn_args),
                    keep_filtered=self.cfg.mode in ("both", "colocate"),
                )
        samples = self._rollout_samples(tasks, episodes, step)  # with the advantages
        trained = [e for e in experiences if not e.action_mask or any(e.action_mask)]
        metrics["experience_pipeline/experience_count"] = float(len(trained))
        # the kept rollouts reach the dashboard before the trainer can send its log-probs of them
        self.monitor.samples(samples, step)
        if self._buffer is not None:
            self._buffer.put(experiences)
        metrics["time/explore_step"] = time.perf_counter() - start
        metrics["explorer/model_version"] = float(version)
        self.step = step
        self.model_versions.append((step, version))
        self.monitor.log(metrics, step)
        log.info("explorer step %d: %s", step, step_summary(metrics))
        return metrics

    def _rollout_samples(self, tasks: list[Task], episodes: list[Experience], step: int) -> list:
        """The rollouts ``monitor.rollout_*`` keeps of this step (rft_core.explorer.rollout_samples)."""
        mon = self.cfg.monitor
        if not keeps_step(step, mon.rollout_samples_interval):
            return []
        tokenizer = getattr(self._engine, "tokenizer", None) if mon.rollout_token_logprobs else None
        return rollout_samples(
            tasks,
            episodes,
            mon.rollout_samples_per_step,
            tokenizer=tokenizer,
            token_logprobs=mon.rollout_token_logprobs,
        )

    def sync_weights(self, version: int, final: bool = False) -> int:
        """Load the trainer's weights of ``version`` (blocking until published)."""
        start = time.perf_counter()
        self.monitor.phase("waiting", self.step)  # for the trainer's weights
        # a vLLM engine joins an nccl broadcast with its own workers and loads it itself
        got, state_dict = self._receiver.receive(version, final=final, engine=self._engine)
        if state_dict is not None and got != self._engine.model_version:
            self._engine.load_weights(state_dict, got)
            self._engine.model_version = got
        self._log_sync(got, start)
        return got

    def load_published_weights(self) -> int:
        """``mode: explore``: load the newest weights the train job published in the job dir
        when newer than the engine's; never waits for the trainer. Returns the version in use."""
        start = time.perf_counter()
        have = self._engine.model_version
        found = self._watch.newer(have)
        if found is None:
            log.info("explorer step %d: nothing newer than version %d published", self.step, have)
            return have
        version, state_dict = found
        self._engine.load_weights(state_dict, version)
        self._engine.model_version = version
        self._log_sync(version, start)
        return version

    def _log_sync(self, version: int, start: float) -> None:
        elapsed = time.perf_counter() - start
        self.last_sync_s = elapsed
        log.info(
            "explorer step %d: loaded weights version %d in %.2fs", self.step, version, elapsed
        )
        self.monitor.log({"time/sync_weight": elapsed}, self.step)

    # -- evaluation --------------------------------------------------------------------------

    def bench(self) -> dict[str, Any]:
        """``mode: bench``: evaluate every saved ``global_step_*`` of the job in order (only the
        latest with ``explorer.bench_on_latest_checkpoint``; the base model when none), logged
        as ``bench/<taskset>/...`` at the checkpoint's step."""

        self._build_auxiliary_models(self._build_engine())
        steps = full_checkpoints(self.job_dir)
        if self.cfg.explorer.bench_on_latest_checkpoint:
            steps = steps[-1:]
        results: dict[str, Any] = {}
        for step, directory in steps or [(0, None)]:
            if directory is not None:
                self._engine.load_weights(load_state_dict(actor_dir(directory)), step)
                self._engine.model_version = step
            metrics = self.evaluate(step, prefix="bench")
            results[str(step)] = metrics
        self.close_engine()
        self.monitor.status("finished", f"bench over steps {[s for s, _ in steps] or [0]}")
        return results

    def evaluate(self, step: int, prefix: str = "eval") -> dict[str, float]:

        start = time.perf_counter()
        self.monitor.phase("eval", step)
        metrics = evaluate_tasksets(
            self.tasksets().evals,
            self._engine,
            auxiliary_models=self._auxiliary_models,
            prefix=prefix,
        )
        if metrics:
            metrics[f"time/{prefix}"] = time.perf_counter() - start
            # the weights this eval measured (a bench of global_step_S is S): the evaluation
            # page compares a checkpoint's bench with the run's eval of the same weights
            metrics[f"explorer/{prefix}_model_version"] = float(self._engine.model_version)
            self.monitor.log(metrics, step)
            self.eval_results[step] = metrics
            log.info(
                "eval at step %d (model version %d): %s", step, self._engine.model_version, metrics
            )
            if prefix == "eval":
                self._prune_with_this_eval()
        return metrics

    def _prune_with_this_eval(self) -> None:
        """Retention re-decides the best checkpoint with the eval just logged (the trainer
        saved the checkpoint before its eval came): one beaten since goes now."""
        tr = self.cfg.trainer
        if not tr.best_checkpoint_metric:
            return  # the trainer's pruning at each save already kept the newest N
        removed = prune_as_configured(self.job_dir, tr)
        if removed:
            log.info(
                "pruned global_step_%s: no longer the best by %s",
                removed,
                tr.best_checkpoint_metric,
            )

    # -- the loop ----------------------------------------------------------------------------

    def _save_meta(self) -> None:
        write_explorer_meta(
            self.job_dir,
            {
                "latest_iteration": self.step,
                "taskset_offset": self._reader.state(),
                "model_version": self._engine.model_version,
            },
        )

    def progress(self) -> dict[str, Any]:
        return dict(self._progress)

    def run(
        self, start_step: int = 0, start_version: int = 0, weights_from: str | None = None
    ) -> dict[str, Any]:
        """Explore until the taskset or ``buffer.total_steps`` ends. Returns a summary with the
        model version each step used and the eval results."""
        try:
            self.start(start_step, start_version, weights_from)
            while self.next_step() is not None:
                pass
            self.end_of_data()
            self.finish()
            return self.summary()
        except BaseException as err:
            self.failed(err)
            raise
        finally:
            self.close_engine()

    def start(
        self, start_step: int = 0, start_version: int = 0, weights_from: str | None = None
    ) -> None:
        """Build the engine, the taskset reader, the buffer and the weight receiver; evaluate
        at step 0 when ``eval_on_startup`` says so."""
        self._progress["step"] = start_step  # a resumed run's bar starts where it left off
        self.monitor.status("running", f"{self.role} started at step {start_step}")
        self._build(start_step, start_version, weights_from)
        end = self._reader.end  # epoch-based runs: the steps the taskset's epochs make
        cfg = self.cfg
        self._progress["total"] = cfg.buffer.total_steps or (
            -(-end // cfg.buffer.batch_size) if end else None
        )
        if cfg.buffer.explorer_input.eval_tasksets and cfg.explorer.eval_on_startup:
            if self.step == 0:
                self.evaluate(0)
        self._pending_sync = self._pending_eval = False

    def next_step(self) -> dict[str, float] | None:
        """One step of the loop: the weight sync and the eval the previous step made due (an
        eval due at the last step is left to the closing eval on the final weights), then
        ``explore_step`` on the next batch. None at the end of the data."""
        cfg = self.cfg
        sync = cfg.synchronizer
        total = cfg.buffer.total_steps
        tasks = None if total is not None and self.step >= total else self._reader.next_batch()
        if not tasks:
            return None
        if self._pending_sync and self._watch is not None:
            self.load_published_weights()
        elif self._pending_sync:
            self.sync_weights(trainer_version_for_explorer_sync(self.step, sync.sync_offset))
        if self._pending_eval:
            # after the sync: the eval logged at step S measures the trainer's step-S weights
            # (sync_offset 0), the ones global_step_S holds, as a bench of that checkpoint does
            self.evaluate(self.step)
        metrics = self.explore_step(tasks)
        self._reader.feedback(self._last_rewards)
        self._progress["step"] = self.step
        syncs = self._receiver is not None or self._watch is not None
        self._pending_sync = syncs and explorer_syncs_after(
            self.step, sync.sync_interval, sync.sync_offset
        )
        eval_interval = cfg.explorer.eval_interval
        self._pending_eval = bool(eval_interval) and self.step % eval_interval == 0
        self._save_meta()
        return metrics

    @property
    def sync_due(self) -> bool:
        """The next ``next_step`` starts by loading the trainer's weights."""
        return self._pending_sync and self._receiver is not None

    def end_of_data(self) -> None:
        """No more steps: close the buffer (the trainer drains what is left) and tell the
        synchronizer, so a trainer waiting for this explorer stops waiting."""
        if self._buffer is not None:
            self._buffer.close()
        if self._receiver is not None:
            self._receiver.explorer_finished()

    def finish(self) -> None:
        """The closing eval (on the trainer's final weights when a trainer runs beside this
        explorer), the meta file and the ``finished`` status."""
        has_eval = bool(self.cfg.buffer.explorer_input.eval_tasksets)
        if self._receiver is not None:
            if has_eval:
                # closing eval on the trained policy: wait for the trainer's final weights
                self.sync_weights(10**12, final=True)
                self.evaluate(self.step)
        elif self._pending_eval and has_eval:
            self.evaluate(self.step)
        self._save_meta()
        report_dropped(self.role)
        self.monitor.status("finished", f"{self.role} finished at step {self.step}")

    def failed(self, err: BaseException) -> None:
        report_dropped(self.role)
        self.monitor.status("failed", f"{self.role}: {err}")
        log.exception("%s failed", self.role)
        if self._buffer is not None:
            self._buffer.close()

    def summary(self) -> dict[str, Any]:
        return {
            "steps": self.step,
            "model_versions": list(self.model_versions),
            "eval": {str(k): v for k, v in self.eval_results.items()},
            "final_model_version": self._engine.model_version if self._engine else None,
        }

    def close(self) -> None:
        release_output(self.role)  # its last captured line and the dropped count, then the monitor
        self.monitor.close()
