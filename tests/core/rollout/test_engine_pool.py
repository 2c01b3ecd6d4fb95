"""Several rollout engines (``explorer.rollout_model.engine_num > 1``): the engine pool on a
real local Ray with the tiny demo model on CPU (real actors, real placement group, real weight
transfer through the object store), and a short ``mode: both`` run with two engines."""

import os
from pathlib import Path

import pytest
import ray
import torch
from ray.util.placement_group import placement_group_table
from ray_cluster import cpus_back
from run_configs import run_config, run_taskset

from rft_core.config import load_config_from_dict
from rft_core.config.resources import gpu_split
from rft_core.errors import ConfigError, EngineUnavailable, ServiceUnavailable
from rft_core.explorer.explorer import Explorer
from rft_core.rollout import build_engine
from rft_core.rollout.base import SamplingParams
from rft_core.rollout.pool import EnginePool, engine_pool_name, remove_engine_pool, split_evenly
from rft_core.runtime.launcher import _engine_pool_cpus, run_experiment
from rft_core.runtime.preflight import preflight
from rft_core.sync.schedule import expected_model_versions

PROMPTS = [f"Question: what is {a} + {a + 3}? Answer:" for a in range(5)]
GREEDY = SamplingParams(n=2, temperature=0.0, max_tokens=6)


@pytest.fixture(scope="module")
def single(demo):
    return build_engine("hf", str(demo.model_dir), device="cpu", seed=0)


@pytest.fixture
def pool(demo, local_ray):
    engines = EnginePool("hf", str(demo.model_dir), engine_num=2, device="cpu", seed=0)
    yield engines
    engines.close()


def _ids(outputs):
    return [[(g.prompt_ids, g.response_ids) for g in gens] for gens in outputs]


def _perturbed(engine, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {
        k: v + 0.05 * torch.randn(v.shape, generator=gen) if v.is_floating_point() else v.clone()
        for k, v in engine.state_dict().items()
    }


def _pg_states() -> list[str]:
    return [pg["state"] for pg in placement_group_table().values()]


def test_split_keeps_order_and_balances():
    assert split_evenly(5, 2) == [(0, 3), (3, 5)]
    assert split_evenly(7, 3) == [(0, 3), (3, 5), (5, 7)]
    assert split_evenly(1, 4) == [(0, 1)]  # idle engines get no call
    assert split_evenly(0, 2) == []


def test_pool_generates_like_one_engine_on_both_engines(pool, single):
    expected = single.generate(PROMPTS, GREEDY)
    got = pool.generate(PROMPTS, GREEDY)
    assert [len(g) for g in got] == [2] * len(PROMPTS)
    assert _ids(got) == _ids(expected)
    # prompts 0-2 on engine 0, 3-4 on engine 1; a prompt's n samples stay on one engine
    assert [[g.extra["engine_rank"] for g in gens] for gens in got] == [[0, 0]] * 3 + [[1, 1]] * 2
    pids = {i["pid"] for i in pool.identities}
    assert len(pids) == 2 and os.getpid() not in pids
    # CPU engines split this machine's cores instead of each taking all of them
    cores = len(os.sched_getaffinity(0))
    assert [i["num_threads"] for i in pool.identities] == [max(1, cores // 2)] * 2
    conversations = [[{"role": "user", "content": p}] for p in PROMPTS[:3]]
    assert _ids(pool.chat(conversations, GREEDY)) == _ids(single.chat(conversations, GREEDY))
    # token ids in (a multi-turn episode's exact context): the same samples as the chat above
    ids = [single.encode_chat(c) for c in conversations]
    assert _ids(pool.generate_ids(ids, GREEDY)) == _ids(single.chat(conversations, GREEDY))


def test_load_weights_reaches_every_engine(pool, demo):
    reference = build_engine("hf", str(demo.model_dir), device="cpu", seed=0)
    before = reference.generate(PROMPTS, GREEDY)
    weights = _perturbed(reference, seed=7)
    reference.load_weights(weights, 3)
    after = reference.generate(PROMPTS, GREEDY)
    assert _ids(after) != _ids(before)  # the new weights change greedy outputs

    pool.load_weights(weights, 3)
    got = pool.generate(PROMPTS, GREEDY)
    assert _ids(got) == _ids(after)  # engine 0's prompts and engine 1's both see them
    assert {g.extra["engine_rank"] for gens in got for g in gens} == {0, 1}
    assert pool.model_version == 3
    assert [ray.get(a.identity.remote())["model_version"] for a in pool._actors] == [3, 3]
    assert {g.extra["model_version"] for gens in got for g in gens} == {3}
    pool.model_version = 5  # the explorer sets the version it resumes from
    assert [ray.get(a.identity.remote())["model_version"] for a in pool._actors] == [5, 5]


def test_close_removes_actors_and_placement_group(demo, local_ray):
    engines = EnginePool("hf", str(demo.model_dir), engine_num=2, device="cpu", name="closing")
    actor = engines._actors[0]
    pg_id = engines._pg.id.hex()
    engines.close()
    assert placement_group_table()[pg_id]["state"] == "REMOVED"
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(actor.identity.remote(), timeout=30)


def test_a_killed_explorer_takes_its_pool_with_it(demo, local_ray, tmp_path):
    cfg = load_config_from_dict(
        run_config(demo, tmp_path, "killed", explorer={"rollout_model": {"engine_num": 2}})
    )
    explorer = ray.remote(Explorer).options(num_cpus=0).remote(cfg)
    ray.get(explorer._build_engine.remote())
    created = [k for k, pg in placement_group_table().items() if pg["state"] == "CREATED"]
    assert len(created) == 1 and ray.available_resources().get("CPU", 0) == 0
    ray.kill(explorer)  # what the launcher does to every actor when one of them fails
    # Ray keeps the placement group of a killed actor until the job ends: its CPUs stay taken
    assert placement_group_table()[created[0]]["state"] == "CREATED"
    assert remove_engine_pool(engine_pool_name(cfg.job_dir))  # the launcher's clean-up
    assert cpus_back(2)
    assert placement_group_table()[created[0]]["state"] == "REMOVED"
    assert not remove_engine_pool(engine_pool_name(cfg.job_dir))  # nothing left the second time


def test_more_engines_than_the_cluster_holds_is_a_clear_error(demo, local_ray):
    # 3 one-CPU bundles on a 2-CPU Ray: never placeable; must fail fast, not hang
    with pytest.raises(ServiceUnavailable) as err:
        EnginePool("hf", str(demo.model_dir), engine_num=3, device="cpu", placement_timeout_s=3)
    message = str(err.value)
    assert "explorer.rollout_model.engine_num=3" in message
    assert "{'CPU': 1.0}" in message and "2 CPU" in message
    assert "REMOVED" in _pg_states() and "PENDING" not in _pg_states()


def test_an_engine_that_cannot_start_fails_with_its_own_message(demo, local_ray):
    # vLLM is not installed here: the engines' error, not Ray's "the actor died"
    with pytest.raises(EngineUnavailable, match="vLLM is not installed"):
        EnginePool("vllm", str(demo.model_dir), engine_num=2)
    assert "CREATED" not in _pg_states() and cpus_back(2)


def test_bad_engine_counts_are_rejected_with_their_yaml_path(demo, tmp_path):
    zero = run_config(demo, tmp_path, "zero", explorer={"rollout_model": {"engine_num": 0}})
    with pytest.raises(ConfigError) as err:
        load_config_from_dict(zero)
    assert "explorer.rollout_model.engine_num" in str(err.value)

    many = run_config(
        demo,
        tmp_path,
        "many",
        cluster={"gpu_per_node": 2},
        explorer={"rollout_model": {"engine_num": 3, "engine_type": "hf"}},
    )
    with pytest.raises(ConfigError) as err:
        load_config_from_dict(many)
    message = str(err.value)
    assert "explorer.rollout_model.engine_num" in message
    assert "engine_num 3 x tensor_parallel_size 1 = 3 GPUs" in message


def test_resource_accounting_for_a_pool(demo, tmp_path):
    gpus = run_config(
        demo,
        tmp_path,
        "gpus",
        cluster={"gpu_per_node": 4},
        explorer={"rollout_model": {"engine_num": 3, "engine_type": "hf"}},
    )
    cfg = load_config_from_dict(gpus)
    # the pool's placement group holds the 3 rollout GPUs; the explorer actor none
    assert gpu_split(cfg) == (0, 1)
    cfg.explorer.rollout_model.engine_num = 1
    assert gpu_split(cfg) == (1, 3)  # one in-process engine: the explorer holds its GPU
    cpu = load_config_from_dict(
        run_config(demo, tmp_path, "cpu", explorer={"rollout_model": {"engine_num": 5}})
    )
    assert _engine_pool_cpus([cpu]) == 5  # a local Ray gets room for 5 one-CPU bundles


def test_nccl_sync_into_gpu_engines_is_refused_before_any_actor_starts(demo, tmp_path):
    gpu_pool = run_config(
        demo,
        tmp_path,
        "gpu_pool",
        cluster={"gpu_per_node": 4, "ray_address": "127.0.0.1:6380"},  # GPU count not checked here
        explorer={"rollout_model": {"engine_num": 2, "engine_type": "hf"}},
    )
    with pytest.raises(ConfigError) as err:
        preflight(load_config_from_dict(gpu_pool))
    assert "synchronizer.sync_method" in str(err.value) and "checkpoint" in str(err.value)
    gpu_pool["synchronizer"]["sync_method"] = "checkpoint"
    preflight(load_config_from_dict(gpu_pool))  # the way the message gives is accepted


@pytest.mark.slow
@pytest.mark.parametrize("sync_method", ["nccl", "checkpoint"])
def test_run_both_with_two_engines(demo, local_ray, tmp_path, sync_method):
    """``trinity run`` path (mode both; nccl = gloo broadcast on CPU; checkpoint = the way GPU
    pools sync) with engine_num 2: the model versions follow sync_interval 1, evaluation runs
    on the pool, and the pool is released."""
    raw = run_config(
        demo,
        tmp_path,
        "two_engines",
        buffer={"total_steps": 3, "batch_size": 3},
        explorer={"rollout_model": {"engine_num": 2}, "eval_interval": 2},
        synchronizer={"sync_method": sync_method},
    )
    # evaluation goes through the pool too: at step 2 and on the final weights
    raw["buffer"]["explorer_input"]["eval_tasksets"] = [run_taskset(demo, "test", "held")]
    cfg = load_config_from_dict(raw)
    result = run_experiment(cfg).last
    assert [tuple(sv) for sv in result.explorer["model_versions"]] == [(1, 0), (2, 1), (3, 2)]
    assert [v for _, v in result.explorer["model_versions"]] == expected_model_versions(3, 1, 0)
    assert result.trainer["steps"] == 3
    assert sorted(result.explorer["eval"]) == ["2", "3"]
    assert "eval/held/accuracy/mean@1" in result.explorer["eval"]["3"]
    explorer_log = (Path(result.job_dir) / "log" / "explorer.log").read_text()
    assert "engine pool: 2 engines (PACK)" in explorer_log
    assert "explorer step 2: loaded weights version 2" in explorer_log
    logs = {p.name for p in (Path(result.job_dir) / "log").iterdir()}
    assert {"explorer_engine_0.log", "explorer_engine_1.log"} <= logs  # one file per actor
    # the pool is gone with the explorer: no placement group left holding CPUs
    assert set(_pg_states()) <= {"REMOVED"}
    assert cpus_back(2)
