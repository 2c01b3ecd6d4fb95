"""Where a job's GPU actors go on a Ray cluster (``rft_core.config.resources.job_placement``):
the placement group's bundles, their roles and strategy, as pure functions of the config (GPU
placement itself cannot run on this machine; the launcher hands these bundles to Ray)."""

from types import SimpleNamespace

import pytest
from run_configs import run_config

from rft_core.config import load_config_from_dict
from rft_core.config.resources import job_placement

DEMO = SimpleNamespace(model_dir="/models/qwen", dataset_dir="/data/gsm8k")


def _plan(tmp_path, mode="both", nodes=1, gpus=2, engine_num=1, tp=1, world_size=None):
    cfg = run_config(DEMO, tmp_path, "placement")
    cfg["mode"] = mode
    cfg["cluster"] = {"node_num": nodes, "gpu_per_node": gpus}
    cfg["explorer"]["rollout_model"] = {"engine_num": engine_num, "tensor_parallel_size": tp}
    if mode == "train":
        cfg["buffer"]["train_batch_size"] = 4
        cfg["buffer"]["trainer_input"]["experience_buffer"]["path"] = "sqlite:///exp.db"
        cfg["synchronizer"]["sync_method"] = "checkpoint"
    if world_size is not None:
        cfg["trainer"]["world_size"] = world_size
    if mode == "colocate":
        cfg["synchronizer"]["sync_method"] = "memory"
    if engine_num > 1:
        cfg["synchronizer"]["sync_method"] = "checkpoint"
    return job_placement(load_config_from_dict(cfg))


def test_two_gpus_one_for_the_explorers_engine_one_for_the_trainer_on_one_node(tmp_path):
    plan = _plan(tmp_path, gpus=2)
    assert plan.roles == ("explorer", "trainer/0")
    assert plan.bundles == ({"GPU": 1.0}, {"GPU": 1.0})
    assert plan.strategy == "STRICT_PACK"
    assert plan.trainer_rank_indices() == []


def test_two_nodes_of_four_the_trainer_ranks_fill_a_node_before_the_next(tmp_path):
    # 8 GPUs: 1 for the engine (engine_num 1), 7 trainer ranks one GPU each; PACK over nodes
    plan = _plan(tmp_path, nodes=2, gpus=4)
    assert plan.roles == ("explorer", *(f"trainer/{r}" for r in range(7)))
    assert all(b == {"GPU": 1.0} for b in plan.bundles)
    assert plan.strategy == "PACK"
    assert plan.trainer_rank_indices() == [2, 3, 4, 5, 6, 7]  # ranks 1..6 after explorer, rank 0


def test_a_tensor_parallel_engine_takes_its_gpus_in_one_bundle(tmp_path):
    plan = _plan(tmp_path, gpus=4, tp=2, world_size=2)
    assert plan.bundles == ({"GPU": 2.0}, {"GPU": 1.0}, {"GPU": 1.0})
    assert plan.strategy == "STRICT_PACK"  # 4 GPUs fit the node


def test_an_engine_pool_places_itself_and_the_trainer_ranks_get_the_rest(tmp_path):
    # 2 engines x 1 GPU in the pool's own placement group; the explorer actor holds no GPU
    plan = _plan(tmp_path, gpus=4, engine_num=2)
    assert plan.roles == ("trainer/0", "trainer/1")
    assert plan.trainer_rank_indices() == [1]


def test_mode_train_puts_every_gpu_of_the_job_in_trainer_ranks(tmp_path):
    plan = _plan(tmp_path, mode="train", nodes=2, gpus=2)
    assert plan.roles == tuple(f"trainer/{r}" for r in range(4))
    assert plan.strategy == "PACK"


@pytest.mark.parametrize("mode,gpus", [("both", 0), ("colocate", 1)])
def test_no_placement_group_on_cpu_or_in_one_actor(tmp_path, mode, gpus):
    # CPU: nothing to place; colocate: one actor asks Ray for its one GPU
    assert _plan(tmp_path, mode=mode, gpus=gpus) is None
