"""Data-parallel trainer ranks: ``trainer.world_size`` PolicyUpdaters sharded with FSDP2.

``TrainerRanks`` has PolicyUpdater's interface (``train_step``, ``save``, ``load``,
``state_dict_for_sync``, ``tokenizer``) and runs it on W ranks: rank 0 in the calling process
(the trainer actor), ranks 1..W-1 in Ray actors (``TrainerRank``), one GPU each on a GPU
cluster, each in its bundle of the job's placement group when the launcher made one
(``rft_core.config.resources.job_placement``: where ``cluster.node_num``/``gpu_per_node`` say). The ranks share the default ``torch.distributed`` process group (NCCL between GPUs,
gloo on CPU, so the same code runs on a laptop), built from a TCP store on rank 0's node.

A step splits the batch into W shards of whole groups (``shard_experiences``), so group
advantages computed in the trainer see every response of their group. Each rank then runs the
same number of collective calls: PolicyUpdater agrees on the global token/row counts, the
micro-batch count and the horizon (``rft_core.trainer.collectives``), so each
rank's loss is its share of the global batch loss, and FSDP2's gradient average equals the
gradient of one process over the whole batch (tested against W = 1). Metrics come back as each
rank's contribution and are merged by ``merge_metrics``; the log-probs a rank recorded for the
dashboard (``rft_core.trainer.recorded_logprobs``) come back with them, into the batch's own
experiences.

Every call reaches all ranks at once; if a remote rank fails, the call raises its error at once
instead of waiting in a collective for the process group's timeout.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import datetime
import logging
import os
from typing import Any

import torch
import torch.distributed as dist

from rft_core.actors.actor_log import log_to_file
from rft_core.actors.placement import in_bundle
from rft_core.config.schema import AlgorithmConfig
from rft_core.experience import Experience
from rft_core.explorer.rollout_samples import SAMPLE_INFO_KEY
from rft_core.sync.nccl import free_port
from rft_core.trainer.policy import PolicyUpdater
from rft_core.trainer.recorded_logprobs import recorded_in, restore_recorded

log = logging.getLogger("rft_core.trainer.ranks")

# the same value on every rank: rank 0's is reported
SAME_ON_EVERY_RANK = ("actor/grad_norm", "actor/lr", "critic/grad_norm")
PROCESS_GROUP_TIMEOUT = datetime.timedelta(minutes=30)


def shard_experiences(experiences: list[Experience], world_size: int) -> list[list[Experience]]:
    """``world_size`` shards of whole groups (``group_id``; experiences without one are groups
    of one), balanced by token count, greedily: largest group to the lightest shard, so group
    advantages computed in the trainer see whole groups. A rank left without a group (fewer
    groups than ranks, e.g. a short last batch) gets a stand-in: a copy of one experience with
    every token masked, which runs the rank's forward and backward and counts in no mean."""
    groups: dict[Any, list[Experience]] = {}
    for i, e in enumerate(experiences):
        groups.setdefault(e.group_id if e.group_id not in (None, "") else ("row", i), []).append(e)

    def tokens(group: list[Experience]) -> int:
        return sum(len(e.prompt_ids) + len(e.response_ids) + len(e.rejected_ids) for e in group)

    shards: list[list[Experience]] = [[] for _ in range(world_size)]
    load = [0] * world_size
    for group in sorted(groups.values(), key=tokens, reverse=True):
        r = min(range(world_size), key=lambda k: (load[k], len(shards[k])))
        shards[r].extend(group)
        load[r] += tokens(group)
    for r, shard in enumerate(shards):
        if not shard:
            shard.append(stand_in(experiences[0], r))
    return shards


def stand_in(experience: Experience, rank: int) -> Experience:
    """A fully masked copy of ``experience`` for a rank that got no group (see above)."""
    response = experience.response_ids or experience.prompt_ids[-1:]
    return dataclasses.replace(
        experience,
        response_ids=list(response),
        action_mask=[0] * len(response),
        logprobs=[0.0] * len(response),  # present: no recompute is asked for on its account
        advantage=0.0,
        reward=0.0,
        group_id=f"__stand_in__/{rank}",
        metrics={},
        # not a kept rollout or pair: its log-probs are recorded by the rank that trains it
        info={k: v for k, v in experience.info.items() if k != SAMPLE_INFO_KEY},
    )


def merge_metrics(per_rank: list[dict[str, float]]) -> dict[str, float]:
    """One metrics dict from the ranks' contributions: sums (each rank reports its share of a
    global mean), max for ``*/max`` and ``time/*``, min for ``*/min``, rank 0's for values every
    rank computes alike (grad norm, lr)."""
    merged: dict[str, float] = {}
    keys = list(dict.fromkeys(k for metrics in per_rank for k in metrics))  # a rank may lack some
    for key in keys:
        values = [float(m[key]) for m in per_rank if key in m]
        if key in SAME_ON_EVERY_RANK:
            merged[key] = values[0]
        elif key.endswith("/max") or key.startswith("time/"):
            merged[key] = max(values)
        elif key.endswith("/min"):
            merged[key] = min(values)
        else:
            merged[key] = sum(values)
    return merged


def _init_process_group(init_method: str, rank: int, world_size: int, backend: str) -> None:
    dist.init_process_group(
        backend,
        init_method=init_method,
        rank=rank,
        world_size=world_size,
        timeout=PROCESS_GROUP_TIMEOUT,
    )


def _cpu_threads(world_size: int) -> None:
    """On CPU the ranks of one machine split its cores instead of each taking all of them."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))


class TrainerRank:
    """Ranks 1..W-1 of a TrainerRanks, each in a Ray actor of its own."""

    def __init__(
        self,
        rank: int,
        world_size: int,
        init_method: str,
        backend: str,
        log_dir: str | None = None,
    ):
        log_to_file(f"{log_dir}/trainer_rank{rank}.log" if log_dir else None)
        self.rank, self.world_size = rank, world_size
        self.init_method, self.backend = init_method, backend
        self.policy: Any = None

    def join(self) -> None:
        if self.backend == "gloo":
            _cpu_threads(self.world_size)
        _init_process_group(self.init_method, self.rank, self.world_size, self.backend)

    def build(
        self, model_path: str, algorithm_cfg: AlgorithmConfig, kwargs: dict[str, Any]
    ) -> None:
        self.policy = PolicyUpdater(model_path, algorithm_cfg, **kwargs)

    def call(self, method: str, *args: Any) -> Any:
        return getattr(self.policy, method)(*args)

    def train_step(self, shard: list[Experience]) -> tuple[dict[str, float], dict[int, Any]]:
        """The step's metrics, and the log-probs it recorded in this copy of the shard (by
        position) for the trainer to put into its own experiences."""
        return self.policy.train_step(shard), recorded_in(shard)

    def leave(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()


class TrainerRanks:
    """The trainer's ``world_size`` FSDP2 ranks behind PolicyUpdater's interface: rank 0 in this
    process, ranks 1..W-1 in ``TrainerRank`` actors (module docstring)."""

    def __init__(
        self,
        world_size: int,
        model_path: str,
        algorithm_cfg: AlgorithmConfig,
        *,
        device: str = "cpu",
        name: str = "trainer",
        log_dir: str | None = None,
        placement: tuple[Any, list[int]] | None = None,
        **kwargs: Any,
    ) -> None:
        # no Ray in the in-process run (GPU machine)
        import ray

        if world_size < 2:
            raise ValueError("TrainerRanks needs world_size >= 2; use PolicyUpdater for one rank")
        self.world_size = world_size
        use_gpu = device.startswith("cuda")
        backend = "nccl" if use_gpu else "gloo"
        address = ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
        init_method = f"tcp://{address}:{free_port()}"
        actor = ray.remote(TrainerRank).options(
            num_cpus=0, num_gpus=1 if use_gpu else 0, max_concurrency=2
        )
        pg, bundles = placement if placement is not None else (None, [])
        self.ranks = [
            (actor.options(**in_bundle(pg, bundles[r - 1])) if pg is not None else actor).remote(
                r, world_size, init_method, backend, log_dir
            )
            for r in range(1, world_size)
        ]
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rank0")
        if backend == "gloo":
            _cpu_threads(world_size)
        joined = [r.join.remote() for r in self.ranks]
        self._together(joined, _init_process_group, init_method, 0, world_size, backend)
        log.info("%s: %d ranks (%s), FSDP2", name, world_size, backend)
        args = dict(kwargs, device=device)
        built = [r.build.remote(model_path, algorithm_cfg, args) for r in self.ranks]
        self.policy = self._together(built, PolicyUpdater, model_path, algorithm_cfg, **args)

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    def _together(self, remote_refs: list, local_fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``local_fn`` here while the ranks run their part; return the local result.
        A remote rank's failure raises at once (the local part may be stuck in a collective)."""
        # no Ray in the in-process run (GPU machine)
        import ray

        local = self._pool.submit(local_fn, *args, **kwargs)
        pending = list(remote_refs)
        while True:
            if local.done() and (not pending or local.exception() is not None):
                return local.result()  # or rank 0's error, while the others wait in a collective
            if pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0.2)
                for ref in done:
                    ray.get(ref)  # raises the rank's error
            else:
                concurrent.futures.wait([local], timeout=0.2)

    def _on_all(self, method: str, per_rank_args: list[tuple]) -> list[Any]:
        # no Ray in the in-process run (GPU machine)
        import ray

        refs = [
            r.call.remote(method, *a) for r, a in zip(self.ranks, per_rank_args[1:], strict=True)
        ]
        local = self._together(refs, getattr(self.policy, method), *per_rank_args[0])
        return [local, *ray.get(refs)]

    def train_step(self, experiences: list[Experience]) -> dict[str, float]:
        import ray

        shards = shard_experiences(experiences, self.world_size)
        refs = [r.train_step.remote(s) for r, s in zip(self.ranks, shards[1:], strict=True)]
        # rank 0 trains the batch's own experiences and records into them; the others copies
        local = self._together(refs, self.policy.train_step, shards[0])
        remote = ray.get(refs)
        for shard, (_, recorded) in zip(shards[1:], remote, strict=True):
            restore_recorded(shard, recorded)
        return merge_metrics([local, *(metrics for metrics, _ in remote)])

    def save(self, job_dir: Any, step: int, save_hf: bool) -> None:
        self._on_all("save", [(job_dir, step, save_hf)] * self.world_size)

    def add_hf_weights(self, job_dir: Any, step: int) -> None:
        self._on_all("add_hf_weights", [(job_dir, step)] * self.world_size)

    def load(self, job_dir: Any, step: int | None) -> int:
        return self._on_all("load", [(job_dir, step)] * self.world_size)[0]

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        # every rank takes part in gathering the full weights; rank 0 gets them
        return self._on_all("state_dict_for_sync", [()] * self.world_size)[0]

    def close(self) -> None:
        # no Ray in the in-process run (GPU machine)
        import ray

        try:
            ray.get([r.leave.remote() for r in self.ranks], timeout=30)
        except Exception as err:  # a dead rank: its actor goes below anyway
            log.warning("trainer ranks did not leave cleanly: %s", err)
        for r in self.ranks:
            ray.kill(r)
        if dist.is_initialized():
            dist.destroy_process_group()
        self._pool.shutdown(wait=False)
