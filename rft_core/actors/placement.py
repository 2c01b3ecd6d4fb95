"""The Ray side of ``rft_core.config.resources.job_placement``: one placement group per job
stage for the explorer actor and the trainer's rank actors on a GPU cluster, so they land where
``cluster.node_num`` / ``cluster.gpu_per_node`` say (the plan itself is a pure function of the
config, tested on CPU). The rollout engines of an engine pool have their own
(``rft_core.rollout.pool``).
"""

from __future__ import annotations

from typing import Any

from rft_core.config.resources import JobPlacement
from rft_core.errors import ServiceUnavailable

PLACEMENT_TIMEOUT_S = 120.0


def job_placement_name(job_dir: str) -> str:
    return f"rft-job:{job_dir}"


def create_job_placement(
    plan: JobPlacement, name: str, timeout_s: float = PLACEMENT_TIMEOUT_S
) -> Any:
    """Reserve ``plan``'s bundles; raises ServiceUnavailable naming them when the cluster
    cannot hold them within ``timeout_s``."""
    # no Ray in the in-process run (GPU machine)
    import ray
    from ray.util.placement_group import placement_group

    pg = placement_group(list(plan.bundles), strategy=plan.strategy, name=name)
    try:
        ray.get(pg.ready(), timeout=timeout_s)
    except ray.exceptions.GetTimeoutError as err:
        ray.util.remove_placement_group(pg)
        gpus = sum(b["GPU"] for b in plan.bundles)
        raise ServiceUnavailable(
            f"Ray could not place the explorer and trainer GPUs ({', '.join(plan.roles)}: "
            f"{gpus:g} GPU(s), {plan.strategy}) within {timeout_s:g}s; the cluster has "
            f"{ray.cluster_resources().get('GPU', 0):g} GPU(s) "
            f"({ray.available_resources().get('GPU', 0):g} free). Check cluster.node_num and "
            "cluster.gpu_per_node against the cluster"
        ) from err
    return pg


def in_bundle(pg: Any, index: int) -> dict[str, Any]:
    """Actor options that schedule it into bundle ``index`` of ``pg``."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {
        "scheduling_strategy": PlacementGroupSchedulingStrategy(
            placement_group=pg,
            placement_group_bundle_index=index,
            # an engine pool or vLLM inside the actor reserves its own resources
            placement_group_capture_child_tasks=False,
        )
    }


def remove_job_placement(name: str) -> bool:
    """Remove the named placement group (a killed actor's reservations stay until then)."""
    # no Ray in the in-process run (GPU machine)
    import ray
    from ray.util.placement_group import get_placement_group

    try:
        pg = get_placement_group(name)
    except ValueError:
        return False
    ray.util.remove_placement_group(pg)
    return True


class JobPlacementGroup:
    """A stage's placement group (none when ``plan`` is None): actor options per role."""

    def __init__(self, plan: JobPlacement | None, name: str):
        self.plan, self.name = plan, name
        self.pg = create_job_placement(plan, name) if plan is not None else None

    def options(self, role: str) -> dict[str, Any]:
        if self.pg is None or role not in self.plan.roles:
            return {}
        return in_bundle(self.pg, self.plan.index(role))

    def trainer_ranks(self) -> tuple[Any, list[int]] | None:
        """(placement group, bundle index of each trainer rank 1..W-1) for ``TrainerRanks``."""
        if self.pg is None or not self.plan.trainer_rank_indices():
            return None
        return self.pg, self.plan.trainer_rank_indices()

    def remove(self) -> None:
        if self.pg is not None:
            remove_job_placement(self.name)


__all__ = [
    "JobPlacementGroup",
    "create_job_placement",
    "in_bundle",
    "job_placement_name",
    "remove_job_placement",
]
