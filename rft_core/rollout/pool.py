"""Several rollout engines behind the one-engine interface (``explorer.rollout_model.engine_num``).

``EnginePool`` holds ``engine_num`` Ray actors, each with one engine built by ``build_engine``
with the same arguments, placed through one Ray placement group: one bundle per engine,
``{"GPU": tensor_parallel_size}`` on a GPU cluster and ``{"CPU": 1}`` on CPU, packed on one
node, spread over nodes when ``cluster.node_num > 1``.

- ``generate`` / ``chat`` split the prompts into contiguous, balanced chunks (sizes differ by
  at most one), one per engine, run them at the same time and concatenate the results in
  prompt order. The ``n`` samples of a prompt stay on one engine, so a GRPO group is sampled
  by one policy even while a sync is half applied elsewhere.
- ``load_weights`` puts the state dict into the object store once (``ray.put``); every engine
  reads the same object and the call returns when all have loaded it. ``model_version`` is
  the pool's, set on every engine at the same time.
- On CPU the engines of one node split its cores (``torch.set_num_threads``) instead of each
  taking all of them.

``close()`` removes the actors and the placement group; an explorer calls it when it finishes
or fails. A killed explorer cannot, and Ray keeps a placement group until the job ends (its
actors die with the explorer, its reserved CPUs/GPUs do not), so the launcher removes it by
name afterwards (``remove_engine_pool``).
"""

from __future__ import annotations

import logging
import os
from typing import Any

import torch
from transformers import AutoTokenizer

from rft_core.actors.actor_log import log_to_file
from rft_core.errors import RFTError, ServiceUnavailable
from rft_core.rollout import build_engine
from rft_core.rollout.base import Generation, SamplingParams

log = logging.getLogger("rft_core.rollout.pool")

PLACEMENT_TIMEOUT_S = 120.0


def split_evenly(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` ranges over ``count`` items, sizes differing by at
    most one (the first ranges take the remainder); empty ranges are dropped."""
    base, extra = divmod(count, parts)
    ranges, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        if stop > start:
            ranges.append((start, stop))
        start = stop
    return ranges


def placement_bundles(
    engine_num: int, tensor_parallel_size: int, use_gpu: bool
) -> list[dict[str, float]]:
    """One bundle per engine: its GPUs on a GPU cluster, one CPU otherwise."""
    bundle = {"GPU": float(tensor_parallel_size)} if use_gpu else {"CPU": 1.0}
    return [dict(bundle) for _ in range(engine_num)]


def placement_strategy(node_num: int) -> str:
    """PACK the engines on one node; SPREAD them when the job has several nodes."""
    return "SPREAD" if node_num > 1 else "PACK"


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class EngineWorker:
    """The Ray actor body: one engine, and who it is (for logs and tests)."""

    def __init__(
        self,
        rank: int,
        engine_type: str,
        model_path: str,
        engines_on_node: int,
        use_gpu: bool,
        engine_kwargs: dict[str, Any],
        log_dir: str | None = None,
    ) -> None:
        log_to_file(f"{log_dir}/explorer_engine_{rank}.log" if log_dir else None)
        if not use_gpu:
            # Ray sets OMP_NUM_THREADS=1 in workers; split this node's cores between its engines
            threads = max(1, _usable_cores() // max(1, engines_on_node))
            torch.set_num_threads(threads)
            engine_kwargs = {**engine_kwargs, "num_threads": threads}
        self.rank = rank
        self._build = (engine_type, model_path, engine_kwargs)
        self.engine: Any = None

    def start(self) -> dict[str, Any]:
        """Build the engine (a method, not ``__init__``: Ray hands a method's exception back
        as it was raised, e.g. "vLLM is not installed", and a constructor's only as "died")."""
        engine_type, model_path, engine_kwargs = self._build
        self.engine = build_engine(engine_type, model_path, **engine_kwargs)
        return self.identity()

    def identity(self) -> dict[str, Any]:
        # no Ray in the in-process run (GPU machine)
        import ray

        ctx = ray.get_runtime_context()
        return {
            "rank": self.rank,
            "pid": os.getpid(),
            "node_id": ctx.get_node_id(),
            "actor_id": ctx.get_actor_id(),
            "num_threads": torch.get_num_threads(),
            "model_version": self.engine.model_version,
        }

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        return self._tagged(self.engine.generate(prompts, params))

    def chat(
        self, conversations: list[list[dict]], params: SamplingParams
    ) -> list[list[Generation]]:
        return self._tagged(self.engine.chat(conversations, params))

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        return self._tagged(self.engine.generate_ids(prompt_ids, params))

    def _tagged(self, outputs: list[list[Generation]]) -> list[list[Generation]]:
        for gens in outputs:
            for gen in gens:
                gen.extra["engine_rank"] = self.rank
        return outputs

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        self.engine.load_weights(state_dict, version)
        self.engine.model_version = int(version)
        return self.engine.model_version

    def set_model_version(self, version: int) -> int:
        self.engine.model_version = int(version)
        return self.engine.model_version


class EnginePool:
    """``engine_num`` rollout engines in Ray actors, used like one engine."""

    def __init__(
        self,
        engine_type: str,
        model_path: str,
        *,
        engine_num: int,
        tensor_parallel_size: int = 1,
        use_gpu: bool = False,
        node_num: int = 1,
        seed: int = 0,
        name: str | None = None,
        placement_timeout_s: float = PLACEMENT_TIMEOUT_S,
        log_dir: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        # no Ray in the in-process run (GPU machine)
        import ray
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if engine_num < 1:
            raise ValueError(f"engine_num must be at least 1, got {engine_num}")
        self.engine_num = engine_num
        self._model_path = model_path
        self._chat_template = engine_kwargs.get("chat_template")
        # what the engines render conversations with (multi-turn workflows render the same)
        self.chat_template_kwargs = dict(engine_kwargs.get("chat_template_kwargs") or {})
        self._tokenizer = None
        self._model_version = 0
        self._actors: list[Any] = []
        bundles = placement_bundles(engine_num, tensor_parallel_size, use_gpu)
        strategy = placement_strategy(node_num)
        self._pg = placement_group(bundles, strategy=strategy, name=name or "")
        try:
            ray.get(self._pg.ready(), timeout=placement_timeout_s)
        except ray.exceptions.GetTimeoutError as err:
            ray.util.remove_placement_group(self._pg)
            raise ServiceUnavailable(
                f"explorer.rollout_model.engine_num={engine_num}: Ray could not place "
                f"{engine_num} engine bundle(s) of {bundles[0]} ({strategy}) within "
                f"{placement_timeout_s:g}s; the cluster has {_resources(ray.cluster_resources())} "
                f"({_resources(ray.available_resources())} free). Lower engine_num, "
                "tensor_parallel_size, or add nodes/GPUs"
            ) from err
        nodes = placement_group_table(self._pg)["bundles_to_node_id"]
        per_node: dict[str, int] = {}
        for node in nodes.values():
            per_node[node] = per_node.get(node, 0) + 1
        actor_cls = ray.remote(EngineWorker)
        for rank in range(engine_num):
            options: dict[str, Any] = {
                "num_cpus": 0 if use_gpu else 1,
                "num_gpus": tensor_parallel_size if use_gpu else 0,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(
                    placement_group=self._pg,
                    placement_group_bundle_index=rank,
                    # not captured: vLLM then runs its tensor-parallel workers as local
                    # processes on this actor's GPUs (its "mp" backend) instead of asking this
                    # placement group for one-GPU bundles it does not have
                    placement_group_capture_child_tasks=False,
                ),
            }
            kwargs = dict(engine_kwargs, seed=seed + rank)  # distinct sampling streams
            if engine_type == "vllm" or tensor_parallel_size > 1:
                kwargs["tensor_parallel_size"] = tensor_parallel_size
            self._actors.append(
                actor_cls.options(**options).remote(
                    rank, engine_type, model_path, per_node[nodes[rank]], use_gpu, kwargs, log_dir
                )
            )
        try:
            self.identities = ray.get([a.start.remote() for a in self._actors])
        except ray.exceptions.RayTaskError as err:
            self.close()
            if isinstance(err.cause, RFTError):  # a user's problem: its own one-line message
                raise err.cause from err
            raise
        except BaseException:
            self.close()
            raise
        log.info(
            "engine pool: %d engines (%s) on nodes %s",
            engine_num,
            strategy,
            [i["node_id"][:8] for i in self.identities],
        )

    # -- the engine interface ----------------------------------------------------------------

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = AutoTokenizer.from_pretrained(self._model_path)
            if self._chat_template:
                self._tokenizer.chat_template = self._chat_template
        return self._tokenizer

    @property
    def model_version(self) -> int:
        return self._model_version

    @model_version.setter
    def model_version(self, version: int) -> None:
        # no Ray in the in-process run (GPU machine)
        import ray

        ray.get([a.set_model_version.remote(int(version)) for a in self._actors])
        self._model_version = int(version)

    def generate(self, prompts: list[str], params: SamplingParams) -> list[list[Generation]]:
        return self._spread("generate", prompts, params)

    def chat(
        self, conversations: list[list[dict]], params: SamplingParams
    ) -> list[list[Generation]]:
        return self._spread("chat", conversations, params)

    def generate_ids(
        self, prompt_ids: list[list[int]], params: SamplingParams
    ) -> list[list[Generation]]:
        return self._spread("generate_ids", prompt_ids, params)

    def load_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """One copy into the object store, read by every engine; returns when all loaded."""
        # no Ray in the in-process run (GPU machine)
        import ray

        ref = ray.put({k: v.detach().cpu() for k, v in state_dict.items()})
        ray.get([a.load_weights.remote(ref, int(version)) for a in self._actors])
        self._model_version = int(version)

    def _spread(
        self, method: str, items: list[Any], params: SamplingParams
    ) -> list[list[Generation]]:
        # no Ray in the in-process run (GPU machine)
        import ray

        ranges = split_evenly(len(items), len(self._actors))
        refs = [
            getattr(actor, method).remote(items[start:stop], params)
            for actor, (start, stop) in zip(self._actors, ranges, strict=False)
        ]
        out: list[list[Generation]] = []
        for chunk in ray.get(refs):
            out.extend(chunk)
        return out

    # -- lifetime ----------------------------------------------------------------------------

    def close(self) -> None:
        """Kill the engine actors and remove the placement group (idempotent)."""
        # no Ray in the in-process run (GPU machine)
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if self._pg is not None:
            ray.util.remove_placement_group(self._pg)
            self._pg = None


def engine_pool_name(job_dir: str | os.PathLike) -> str:
    """The placement group name of a job dir's pool, for ``remove_engine_pool``."""
    return f"rft-engines:{os.fspath(job_dir)}"


def remove_engine_pool(name: str) -> bool:
    """Remove the named pool's placement group, and with it its engine actors. A killed
    explorer never runs ``close()``, and Ray keeps a placement group until the job ends, not
    until the actor that made it dies. Returns whether there was one to remove."""
    # no Ray in the in-process run (GPU machine)
    import ray
    from ray.util.placement_group import get_placement_group

    try:
        pg = get_placement_group(name)
    except ValueError:
        return False  # closed already, or never made
    ray.util.remove_placement_group(pg)
    return True


def _resources(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if k in ("CPU", "GPU")}
    return ", ".join(f"{v:g} {k}" for k, v in sorted(shown.items())) or "no CPU/GPU"


__all__ = [
    "EnginePool",
    "EngineWorker",
    "engine_pool_name",
    "placement_bundles",
    "placement_strategy",
    "remove_engine_pool",
    "split_evenly",
]
