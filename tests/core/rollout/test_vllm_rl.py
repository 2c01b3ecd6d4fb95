"""The vLLM adapter's RL paths against the fake vLLM 0.26 (``tests/core/fake_vllm``; vLLM itself
cannot be installed on this CPU machine, so it is the one thing mocked): weight sync without
CPU serialization (in-process tensors, shared-memory bucket handles, the NCCL broadcast run for
real over gloo), greedy groups, sleep/wake for colocate, rollout overhead settings, and the
tested-version check.

What stands in for the GPU: the fake's workers hold the tiny model's Hugging Face weights on CPU
(``worker.model_runner.model``, with vLLM's ``load_weights`` contract), run in this process, and
see ``collective_rpc`` arguments after vLLM's msgpack round trip unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``; a CPU shared-memory handle stands in for a CUDA IPC handle
and gloo for NCCL. What is real: the adapter, the worker extension, the bucket packing, the
torch.distributed broadcast and the tokenizer.
"""

from __future__ import annotations

import threading

import pytest
import torch
from vllm_fakes import SEED, vllm_engine

from rft_core.config import load_config
from rft_core.errors import ConfigError
from rft_core.rollout import SamplingParams, engine_settings
from rft_core.rollout import vllm as vllm_adapter
from rft_core.rollout.vllm_sync import pack_bucket, transfer_metas, unpack_bucket
from rft_core.rollout.vllm_version import check_vllm_version, parse_version, vllm_version_problem
from rft_core.sync.nccl import BroadcastGroup, bucket_plan, free_port, tensor_metas


def perturbed(engine, scale=0.5, seed=0):
    hf = engine.llm.workers[0].model_runner.model.hf
    torch.manual_seed(seed)
    return {k: v + scale * torch.randn_like(v) for k, v in hf.state_dict().items()}


def assert_workers_hold(engine, expected, **tol):
    for worker in engine.llm.workers:
        got = dict(worker.model_runner.model.hf.named_parameters())
        for name in ("model.norm.weight", "model.layers.1.self_attn.q_proj.weight"):
            torch.testing.assert_close(got[name], expected[name], **tol)


# -- weight sync ------------------------------------------------------------------------------


def test_the_old_path_fails_in_the_fake_as_it_did_on_real_vllm(fake_vllm, model_dir):
    """The state dict through collective_rpc arrives as lists (vLLM's msgpack), as issue 21
    saw on the H200: ``'list' object has no attribute 'to'``."""
    engine = vllm_engine(model_dir)

    def old_rft_load_weights(self, named_tensors):  # the adapter's worker method until now
        return [t.to("cpu") for _, t in named_tensors]

    named = [("model.norm.weight", torch.ones(3))]
    with pytest.raises(AttributeError, match="'list' object has no attribute 'to'"):
        engine.llm.collective_rpc(old_rft_load_weights, args=(named,))
    # and the new worker method, given a serialized tensor, says which path to use
    with pytest.raises(TypeError, match="in-process engine only"):
        engine.llm.collective_rpc("rft_load_weights", args=(named,))


def test_buckets_are_packed_in_the_engine_dtype_and_unpacked_as_views():
    sd = {
        "a": torch.arange(6, dtype=torch.float32).reshape(2, 3),
        "b": torch.tensor([0.5, 1.25]),
        "step": torch.tensor([7], dtype=torch.int64),
    }
    metas = transfer_metas(sd, torch.bfloat16)
    # floating tensors cross in the engine's dtype (half an fp32 trainer's bytes); ints as they are
    assert [m.dtype for m in metas] == ["torch.bfloat16", "torch.bfloat16", "torch.int64"]
    plan = bucket_plan(metas, bucket_bytes=1 << 20)
    assert [[m.name for m in b] for b in plan] == [["a", "b"], ["step"]]
    flat = pack_bucket(sd, plan[0], torch.device("cpu"))
    # 6 + 2 elements, in order: 0..5 then 0.5, 1.25 (exact in bf16)
    assert flat.dtype == torch.bfloat16 and flat.tolist() == [0, 1, 2, 3, 4, 5, 0.5, 1.25]
    views = dict(unpack_bucket(flat, plan[0]))
    assert views["a"].shape == (2, 3) and views["a"].data_ptr() == flat.data_ptr()
    assert views["b"].tolist() == [0.5, 1.25]


def test_multiprocess_engine_loads_bounded_buckets_by_handle(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, tensor_parallel_size=2, dtype="float32", sync_bucket_bytes=4096)
    assert engine.in_process is False  # vLLM's default: the engine core in its own process
    new = perturbed(engine)
    engine.load_weights(new, version=2)
    calls = [r for r in engine.llm.rpc_calls if r["method"] == "rft_load_ipc_bucket"]
    plan = bucket_plan(tensor_metas(new), 4096)
    assert len(calls) == len(plan) > 1  # one handle per bucket, never the tensors
    for call, bucket in zip(calls, plan, strict=True):
        handle, metas = call["args"]
        assert isinstance(handle, bytes) and len(handle) < 1024  # a handle, not the data
        assert [m[0] for m in metas] == [m.name for m in bucket]
        # a bucket holds at most 4096 bytes unless one tensor alone is larger
        nbytes = sum(torch.Size(m[1]).numel() * 4 for m in metas)
        assert nbytes <= 4096 or len(metas) == 1
    assert_workers_hold(engine, new, rtol=0, atol=0)
    assert engine.model_version == 2 and engine.last_sync_s > 0


def test_tied_embeddings_cross_once(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, dtype="float32")
    new = perturbed(engine, seed=6)
    new["lm_head.weight"] = new["model.embed_tokens.weight"]  # tied, as the trainer holds them
    engine.load_weights(new, version=1)
    sent = [m[0] for r in engine.llm.rpc_calls for m in r["args"][1]]
    assert "lm_head.weight" not in sent and "model.embed_tokens.weight" in sent
    assert len(sent) == len(new) - 1
    hf = engine.llm.workers[0].model_runner.model.hf
    torch.testing.assert_close(hf.lm_head.weight, new["model.embed_tokens.weight"], rtol=0, atol=0)


def test_bf16_engine_receives_bf16_rounded_weights(fake_vllm, model_dir):
    engine = vllm_engine(model_dir)  # dtype auto = bfloat16, as on the trainer
    new = perturbed(engine, seed=1)
    engine.load_weights(new, version=1)
    rounded = {k: v.to(torch.bfloat16).float() for k, v in new.items()}
    assert_workers_hold(engine, rounded, rtol=0, atol=0)


def test_in_process_engine_gets_the_trainers_own_tensors(fake_vllm, model_dir, monkeypatch):
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    engine = vllm_engine(model_dir)
    assert engine.in_process is True
    new = perturbed(engine, seed=2)
    engine.load_weights(new, version=4)
    rpc = engine.llm.rpc_calls[-1]
    assert rpc["method"] == "rft_load_weights"
    sent = dict(rpc["args"][0])
    # the very storage of the trainer's tensors: no copy, no serialization
    assert all(sent[k].data_ptr() == new[k].data_ptr() for k in new)
    assert_workers_hold(engine, new, rtol=0, atol=0)
    # with two workers vLLM's executor is multiprocess whatever the variable says
    assert vllm_engine(model_dir, tensor_parallel_size=2).in_process is False


@pytest.mark.parametrize("tp", [1, 2])
def test_nccl_broadcast_reaches_every_worker_over_gloo(fake_vllm, model_dir, tp):
    """Mode both: the trainer (rank 0, a thread here) broadcasts packed buckets; the engine's
    workers join as ranks 1..tp and load each bucket as it lands. Gloo stands in for NCCL."""
    engine = vllm_engine(model_dir, tensor_parallel_size=tp, dtype="float32")
    assert engine.broadcast_receivers == tp
    new = perturbed(engine, seed=3)
    metas = tensor_metas(new)
    port = free_port()
    sent: list[int] = []

    def trainer():
        group = BroadcastGroup("127.0.0.1", port, 0, 1 + tp, timeout_s=60)
        for _ in range(2):  # two syncs over one group
            sent.append(group.send(new, metas, bucket_bytes=8192))

    thread = threading.Thread(target=trainer)
    thread.start()
    engine.receive_broadcast("127.0.0.1", port, metas, 5, timeout_s=60, bucket_bytes=8192)
    engine.receive_broadcast("127.0.0.1", port, metas, 6, timeout_s=60, bucket_bytes=8192)
    thread.join(60)
    assert sent and sent[0] == len(bucket_plan(metas, 8192)) > 1
    methods = [r["method"] for r in engine.llm.rpc_calls]
    # joined once, received twice
    assert methods == ["rft_join_broadcast", "rft_receive_broadcast", "rft_receive_broadcast"]
    assert_workers_hold(engine, new, rtol=0, atol=0)
    assert engine.model_version == 6


# -- greedy groups ----------------------------------------------------------------------------


def test_the_fake_refuses_greedy_n_above_one_as_vllm_does(fake_vllm):
    import vllm

    with pytest.raises(ValueError, match=r"^n must be 1 when using greedy sampling, got 2\.$"):
        vllm.SamplingParams(n=2, temperature=0.0)
    vllm.SamplingParams(n=2, temperature=0.5)


def test_greedy_group_is_n_requests_regrouped_per_prompt(fake_vllm, model_dir):
    engine = vllm_engine(model_dir)
    prompts = [[40, 41, 42], [50, 51]]
    groups = engine.generate_ids(prompts, SamplingParams(n=3, temperature=0.0, max_tokens=4))
    call = engine.llm.generate_calls[-1]
    # each prompt three times, as consecutive n=1 requests
    assert [p["prompt_token_ids"] for p in call["prompts"]] == [prompts[0]] * 3 + [prompts[1]] * 3
    assert {sp.n for sp in call["sampling_params"]} == {1}
    assert [len(g) for g in groups] == [3, 3]
    # the greedy answer to each prompt alone (a group of one, so no regrouping to get wrong);
    # the fake's greedy tokens are a function of the prompt, and the two prompts' differ
    alone = [
        engine.generate_ids([p], SamplingParams(temperature=0.0, max_tokens=4))[0][0].response_ids
        for p in prompts
    ]
    assert alone[0] != alone[1]
    for prompt, response, group in zip(prompts, alone, groups, strict=True):
        for gen in group:
            assert gen.prompt_ids == prompt
            assert gen.response_ids == response  # this prompt's completions, not another's
            # the fake's sample 0 of a request runs to max_tokens with log-probs -0.125 (k+1)
            assert gen.logprobs == [-0.125, -0.25, -0.375, -0.5]
            assert gen.finish_reason == "length"
    # a sampled group stays one request of n
    engine.generate_ids(prompts, SamplingParams(n=3, temperature=1.0, max_tokens=2))
    call = engine.llm.generate_calls[-1]
    assert len(call["prompts"]) == 2 and call["sampling_params"][0].n == 3


def test_flat_and_nested_logprobs_read_the_same(fake_vllm, model_dir, monkeypatch):
    params = SamplingParams(n=2, max_tokens=5, seed=4)
    monkeypatch.setattr(vllm_adapter, "FLAT_LOGPROBS", False)
    nested = vllm_engine(model_dir).generate_ids([[40, 41]], params)
    monkeypatch.setattr(vllm_adapter, "FLAT_LOGPROBS", True)
    engine = vllm_engine(model_dir)
    flat = engine.generate_ids([[40, 41]], params)
    assert type(engine.llm.generate_calls[-1]["outputs"][0].outputs[0].logprobs).__name__ == (
        "FlatLogprobs"
    )
    assert [g.logprobs for g in flat[0]] == [g.logprobs for g in nested[0]]
    # sample 1 ends with EOS after 2 tokens: -0.125 (k+1) - 0.5
    assert flat[0][1].logprobs == [-0.625, -0.75]


# -- sleep / wake -----------------------------------------------------------------------------


def test_colocate_sleeps_while_training_and_wakes_weights_then_kv(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, enable_sleep_mode=True, dtype="float32")
    assert engine.llm.init_kwargs["enable_sleep_mode"] is True
    engine.generate_ids([[40, 41]], SamplingParams(max_tokens=2))
    engine.release_memory()  # the colocate loop, before the trainer steps
    engine.release_memory()  # twice is once
    assert engine.llm.events.count("sleep:1") == 1
    mark = len(engine.llm.events)
    new = perturbed(engine, seed=5)
    engine.load_weights(new, version=1)
    engine.generate_ids([[40, 41]], SamplingParams(max_tokens=2))
    events = engine.llm.events[mark:]
    # weights woken before the load, the KV cache only when generating; no prefix-cache reset
    # while the cache sleeps (sleeping dropped it)
    assert events[0] == "wake_up:weights"
    assert events[1:-2] == ["collective_rpc:rft_load_ipc_bucket"] * (len(events) - 3)
    assert events[-2:] == ["wake_up:kv_cache", "generate"]
    assert_workers_hold(engine, new, rtol=0, atol=0)
    # a step without a sync: both wake before generating
    engine.release_memory()
    engine.generate_ids([[40, 41]], SamplingParams(max_tokens=2))
    assert engine.llm.events[-2:] == ["wake_up:weights,kv_cache", "generate"]


def test_without_sleep_mode_release_memory_does_nothing(fake_vllm, model_dir):
    engine = vllm_engine(model_dir)
    engine.release_memory()
    assert not any(e.startswith("sleep") for e in engine.llm.events)
    with pytest.raises(ValueError, match="Sleep mode is not enabled"):  # the fake checks it
        engine.llm.sleep(level=1)


# -- settings from the run's shape ------------------------------------------------------------


def _cfg(tmp_path, monkeypatch, *overrides):
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    return load_config(SEED, list(overrides))


def test_max_num_seqs_and_sleep_mode_come_from_the_run(fake_vllm, model_dir, tmp_path, monkeypatch):
    # the seed: batch_size 128 x repeat_times 8 = 1024 rows per explorer step
    settings = engine_settings(_cfg(tmp_path, monkeypatch))
    assert settings["max_num_seqs"] == 1024 and "enable_sleep_mode" not in settings
    # 4 x 8 = 32 rows: vLLM's default 256 is kept so evals of more rows stay batched
    small = engine_settings(_cfg(tmp_path, monkeypatch, "buffer.batch_size=4"))
    assert small["max_num_seqs"] == 256
    colocated = engine_settings(
        _cfg(tmp_path, monkeypatch, "mode=colocate", "synchronizer.sync_method=memory")
    )
    assert colocated["enable_sleep_mode"] is True
    engine = vllm_engine(model_dir, **colocated)
    assert engine.llm.init_kwargs["enable_sleep_mode"] is True
    assert engine.llm.init_kwargs["max_num_seqs"] == 1024


# -- tested versions --------------------------------------------------------------------------


def test_version_parsing_and_the_tested_range():
    assert parse_version("0.26.0") == (0, 26, 0)
    assert parse_version("0.26.1rc2+cu129") == (0, 26, 1)
    assert parse_version("0.27") == (0, 27, 0)
    assert parse_version("dev") is None
    assert vllm_version_problem("0.26.0") is None and vllm_version_problem("0.26.9") is None
    for bad in ("0.25.9", "0.27.0", "0.11.0", "dev"):
        assert "outside the tested range >=0.26.0,<0.27" in vllm_version_problem(bad)
    assert "not installed" in vllm_version_problem(None)


@pytest.mark.parametrize("version", ["0.11.0", "0.27.1"])
def test_an_untested_vllm_is_one_config_error_line(fake_vllm, model_dir, monkeypatch, version):
    from rft_core.rollout import build_engine

    monkeypatch.setenv("FAKE_VLLM_VERSION", version)
    with pytest.raises(ConfigError) as err:
        build_engine("vllm", str(model_dir))
    assert err.value.path == "explorer.rollout_model.engine_type"
    assert str(err.value) == (
        f"explorer.rollout_model.engine_type: vLLM {version} is outside the tested range "
        ">=0.26.0,<0.27; install a tested one (pip install 'rft-studio[vllm]', "
        "vllm>=0.26.0,<0.27) or set explorer.rollout_model.engine_type: hf"
    )
    assert "\n" not in str(err.value) and err.value.exit_code == 2


def test_the_tested_fake_version_passes(fake_vllm, monkeypatch):
    monkeypatch.setenv("FAKE_VLLM_VERSION", "0.26.0")
    assert check_vllm_version() == "0.26.0"


@pytest.mark.parametrize(
    ("version", "refused"), [("0.11.0", True), ("0.26.0", False), (None, True)]
)
def test_the_launchers_preflight_names_an_untested_or_missing_vllm(
    fake_vllm, demo, tmp_path, monkeypatch, version, refused
):
    """Before any actor starts (``preflight``; the CLI prints the line and exits 2). The
    machine has no GPU, so the GPU-count problem is reported in the same line."""
    import sys

    from run_configs import run_config

    from rft_core.config import load_config_from_dict
    from rft_core.runtime.preflight import preflight

    if version is None:
        monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    else:
        monkeypatch.setenv("FAKE_VLLM_VERSION", version)
    cfg = run_config(
        demo,
        tmp_path,
        "vllm_version",
        cluster={"gpu_per_node": 2},
        explorer={"rollout_model": {"engine_type": "vllm"}},
    )
    with pytest.raises(ConfigError) as err:
        preflight(load_config_from_dict(cfg))
    line = str(err.value)
    assert "\n" not in line and "cluster.gpu_per_node" in line
    assert ("explorer.rollout_model.engine_type: " in line) is refused
    if version == "0.11.0":
        assert "vLLM 0.11.0 is outside the tested range >=0.26.0,<0.27" in line
    if version is None:
        assert "vLLM is not installed" in line
