"""Engine placement over nodes: a real two-node Ray cluster on this machine
(``ray.cluster_utils.Cluster``, 2 CPUs per node so that both engines *could* share a node) and
the explorer's own pool wiring (``Explorer._build_engine``) with the tiny demo model on CPU."""

import os

import pytest
import ray
from ray.cluster_utils import Cluster
from ray.util.placement_group import placement_group_table
from ray_cluster import cpus_back
from run_configs import run_config

from rft_core.config import load_config_from_dict
from rft_core.explorer.explorer import Explorer
from rft_core.rollout.base import SamplingParams


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="WARNING")
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def _explorer(demo, tmp_path, name: str, node_num: int) -> Explorer:
    cfg = load_config_from_dict(
        run_config(
            demo,
            tmp_path,
            name,
            cluster={"node_num": node_num, "gpu_per_node": 0},
            explorer={"rollout_model": {"engine_num": 2}},
        )
    )
    return Explorer(cfg)


@pytest.mark.parametrize("node_num", [2, 1])
def test_engines_spread_over_nodes_only_when_the_job_has_several(
    demo, two_nodes, tmp_path, node_num
):
    # all 4 CPUs free first: PACK is soft, and falls back to two nodes when one lacks room
    assert cpus_back(4)
    explorer = _explorer(demo, tmp_path, f"nodes{node_num}", node_num)
    explorer._build_engine()
    pool = explorer._engine
    try:
        nodes = [i["node_id"] for i in pool.identities]
        assert len({n["NodeID"] for n in ray.nodes() if n["Alive"]}) == 2
        if node_num == 2:
            assert nodes[0] != nodes[1]  # SPREAD: one engine per node
        else:
            assert nodes[0] == nodes[1]  # PACK: both on one node (it has the CPUs for both)
        gens = pool.generate(["1 + 1 ="] * 3, SamplingParams(n=2, temperature=0.0, max_tokens=3))
        assert [[g.extra["engine_rank"] for g in gs] for gs in gens] == [[0, 0], [0, 0], [1, 1]]
        # a node's cores are split between the engines on it, not between all engines
        cores = len(os.sched_getaffinity(0))
        on_node = 1 if node_num == 2 else 2
        assert [i["num_threads"] for i in pool.identities] == [max(1, cores // on_node)] * 2
        pg_id = pool._pg.id.hex()
    finally:
        explorer.close_engine()
        explorer.close()
    assert placement_group_table()[pg_id]["state"] == "REMOVED"
