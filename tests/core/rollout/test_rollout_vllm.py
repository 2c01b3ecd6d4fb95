"""The ``vllm`` rollout engine adapter (``rft_core/rollout/vllm.py``) against vLLM's public API.

vLLM is mocked: it cannot be installed on this machine (no GPU, no CUDA build). The stand-in
is the fake package in ``tests/core/fake_vllm`` (put on ``sys.path`` by the ``fake_vllm``
fixture only): it reproduces the signatures, argument checks and output structures of vLLM
0.26.0 (``LLM(...)`` forwarding unknown keywords to ``EngineArgs``, which raises
``TypeError``; ``SamplingParams``; ``TokensPrompt``; ``RequestOutput`` / ``CompletionOutput`` with
``{token_id: Logprob}`` per token; ``collective_rpc`` into the ``worker_extension_cls`` mixin, its
arguments through vLLM's msgpack round trip), and records every call. The weight-sync paths,
greedy groups, sleep/wake and the version check are in ``test_vllm_rl.py``. What is real: the adapter, the tokenizer and chat template of the tiny
model, and the Hugging Face weights the fake workers hold and load new weights into.
"""

from __future__ import annotations

import sys

import pytest
import torch
from vllm_fakes import SEED, vllm_engine

from rft_core.config import load_config
from rft_core.errors import DataError, EngineUnavailable
from rft_core.rollout import SamplingParams, build_engine, engine_settings, vllm_usable
from rft_core.rollout.vllm import LOGPROBS_MODE, WORKER_EXTENSION, finish_reason

CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "1+2=?"}]


def test_engine_settings_reach_vllm_llm(fake_vllm, model_dir):
    engine = vllm_engine(
        model_dir,
        dtype="bf16",
        seed=7,
        max_model_len=200,
        tensor_parallel_size=2,
        gpu_memory_utilization=0.55,
        enforce_eager=True,
        enable_prefix_caching=False,
        device="cuda",  # hf-engine options the explorer passes to every engine: dropped
        num_threads=4,
    )
    got = engine.llm.init_kwargs
    assert {k: got[k] for k in ("model", "dtype", "seed", "tensor_parallel_size")} == {
        "model": str(model_dir),
        "dtype": "bfloat16",
        "seed": 7,
        "tensor_parallel_size": 2,
    }
    assert got["max_model_len"] == 200 and got["gpu_memory_utilization"] == 0.55
    assert got["enforce_eager"] is True and got["enable_prefix_caching"] is False
    assert got["enable_chunked_prefill"] is True
    assert got["logprobs_mode"] == LOGPROBS_MODE == "processed_logprobs"
    assert got["worker_extension_cls"] == WORKER_EXTENSION
    assert "device" not in got and "num_threads" not in got
    assert len(engine.llm.workers) == 2  # one worker per tensor-parallel rank
    # our "auto" is bfloat16, not vLLM's auto (which turns an fp32 checkpoint into fp16)
    assert vllm_engine(model_dir).llm.init_kwargs["dtype"] == "bfloat16"


def test_yaml_rollout_model_settings_reach_vllm(fake_vllm, model_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path))
    cfg = load_config(
        SEED,
        [
            "explorer.rollout_model.gpu_memory_utilization=0.7",
            "explorer.rollout_model.enforce_eager=true",
            "explorer.rollout_model.enable_prefix_caching=false",
            "explorer.rollout_model.seed=5",
            "explorer.rollout_model.dtype=bf16",
            "explorer.rollout_model.extra_engine_args.max_num_seqs=32",
            "model.enable_thinking=false",
        ],
    )
    engine = vllm_engine(model_dir, tensor_parallel_size=2, **engine_settings(cfg))
    got = engine.llm.init_kwargs
    assert (got["gpu_memory_utilization"], got["enforce_eager"], got["seed"]) == (0.7, True, 5)
    assert got["enable_prefix_caching"] is False and got["dtype"] == "bfloat16"
    assert got["max_model_len"] == 2048 and got["max_num_seqs"] == 32
    assert got["tensor_parallel_size"] == 2
    assert engine.chat_template_kwargs == {"enable_thinking": False}


def test_extra_engine_args_pass_through_and_a_typo_fails_like_vllm(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, max_num_seqs=64)
    assert engine.llm.init_kwargs["max_num_seqs"] == 64
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_num_seq'"):
        vllm_engine(model_dir, max_num_seq=64)


def test_sampling_parameters_and_token_prompts(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, seed=3)
    prompts = [[40, 41, 42], [50, 51]]
    params = SamplingParams(n=3, temperature=0.7, top_p=0.9, top_k=20, max_tokens=6, seed=11)
    engine.generate_ids(prompts, params)
    call = engine.llm.generate_calls[-1]
    assert call["prompts"] == [{"prompt_token_ids": [40, 41, 42]}, {"prompt_token_ids": [50, 51]}]
    assert call["use_tqdm"] is False
    sp = call["sampling_params"][0]
    assert (sp.n, sp.temperature, sp.top_p, sp.top_k, sp.max_tokens, sp.seed) == (
        3,
        0.7,
        0.9,
        20,
        6,
        11,
    )
    assert sp.logprobs == 0  # the sampled token's log-prob only
    assert sp.detokenize is False  # text: one batch_decode on our side
    # top_k -1 (our "off") is vLLM's 0; no seed: a fresh, reproducible one per call
    engine.generate_ids(prompts, SamplingParams(n=2, top_k=-1, max_tokens=4))
    engine.generate_ids(prompts, SamplingParams(n=2, top_k=-1, max_tokens=4))
    first, second = (c["sampling_params"][0] for c in engine.llm.generate_calls[-2:])
    assert first.top_k == 0 and first.top_p == 1.0 and first.temperature == 1.0
    assert (first.seed, second.seed) == (3 * 1_000_003 + 1, 3 * 1_000_003 + 2)


def test_outputs_become_generations_with_per_token_logprobs(fake_vllm, model_dir):
    engine = vllm_engine(model_dir)
    engine.model_version = 4
    prompts = [[40, 41, 42], [50, 51]]
    groups = engine.generate_ids(prompts, SamplingParams(n=3, max_tokens=5, seed=1))
    outputs = engine.llm.generate_calls[-1]["outputs"]
    assert [len(g) for g in groups] == [3, 3]
    eos = engine.tokenizer.eos_token_id
    for prompt, group, request in zip(prompts, groups, outputs, strict=True):
        for gen, completion in zip(group, request.outputs, strict=True):
            assert gen.prompt_ids == prompt
            assert gen.response_ids == list(completion.token_ids)
            assert gen.logprobs == [
                step[t].logprob
                for t, step in zip(gen.response_ids, completion.logprobs, strict=True)
            ]
            # vLLM's detokenizer is off; the adapter decodes all responses in one batch_decode
            assert completion.text == ""
            assert gen.text == engine.tokenizer.decode(gen.response_ids, skip_special_tokens=True)
            assert gen.extra == {"model_version": 4}
        # the fake's sample 0 runs to max_tokens, sample 1 ends with EOS after 2 tokens
        assert group[0].finish_reason == "length" and len(group[0].response_ids) == 5
        assert group[1].finish_reason == "stop" and group[1].response_ids[-1] == eos
    # the fake's log-prob of token k of sample j is -0.125 (k+1) - 0.5 j
    assert groups[0][1].logprobs == [-0.625, -0.75]
    assert groups[0][0].logprobs == [-0.125, -0.25, -0.375, -0.5, -0.625]


def test_an_aborted_request_is_an_error_not_a_sample():
    assert (finish_reason("stop"), finish_reason("length")) == ("stop", "length")
    with pytest.raises(RuntimeError, match="finish_reason='abort'"):
        finish_reason("abort")


def test_chat_renders_the_model_template_with_a_generation_prompt(fake_vllm, model_dir):
    from transformers import AutoTokenizer

    engine = vllm_engine(model_dir)
    engine.chat([CONVERSATION], SamplingParams(max_tokens=3))
    sent = engine.llm.generate_calls[-1]["prompts"][0]["prompt_token_ids"]
    text = AutoTokenizer.from_pretrained(model_dir).apply_chat_template(
        CONVERSATION, tokenize=False, add_generation_prompt=True
    )
    assert engine.tokenizer.decode(sent) == text
    assert text.endswith("<|im_start|>assistant\n")


def test_custom_chat_template_and_its_kwargs_are_used(fake_vllm, model_dir):
    template = (
        "{% for m in messages %}[{{ m['role'] }}:{{ m['content'] }}]{% endfor %}"
        "{% if add_generation_prompt %}ASSISTANT(thinking={{ enable_thinking }}):{% endif %}"
    )
    engine = vllm_engine(
        model_dir, chat_template=template, chat_template_kwargs={"enable_thinking": False}
    )
    engine.chat([CONVERSATION], SamplingParams(max_tokens=3))
    sent = engine.llm.generate_calls[-1]["prompts"][0]["prompt_token_ids"]
    assert engine.tokenizer.decode(sent) == (
        "[system:be brief][user:1+2=?]ASSISTANT(thinking=False):"
    )


def test_load_weights_reaches_every_worker_through_the_extension(fake_vllm, model_dir):
    # float32 engine: the buckets cross in the engine's dtype, so the values arrive exactly
    engine = vllm_engine(model_dir, tensor_parallel_size=2, dtype="float32")
    hf = engine.llm.workers[0].model_runner.model.hf
    torch.manual_seed(0)
    new = {k: v + 0.5 * torch.randn_like(v) for k, v in hf.state_dict().items()}
    engine.load_weights(new, version=3)
    # vLLM's default engine is multiprocess: packed buckets as shared-memory handles (bytes)
    rpcs = [r for r in engine.llm.rpc_calls if r["method"] == "rft_load_ipc_bucket"]
    assert rpcs and all(isinstance(r["args"][0], bytes) for r in rpcs)
    assert [m[0] for r in rpcs for m in r["args"][1]] == list(new)
    for worker in engine.llm.workers:
        params = dict(worker.model_runner.model.hf.named_parameters())
        torch.testing.assert_close(params["model.norm.weight"], new["model.norm.weight"])
        torch.testing.assert_close(
            params["model.layers.1.mlp.up_proj.weight"], new["model.layers.1.mlp.up_proj.weight"]
        )
    # the KV blocks cached for old weights are dropped after the load, not before
    assert engine.llm.events[-2:] == ["collective_rpc:rft_load_ipc_bucket", "reset_prefix_cache"]
    assert engine.model_version == 3
    out = engine.generate_ids([[40, 41]], SamplingParams(max_tokens=2))
    assert out[0][0].extra["model_version"] == 3


def test_prompts_that_do_not_fit_are_a_data_error(fake_vllm, model_dir):
    engine = vllm_engine(model_dir, max_model_len=30)
    with pytest.raises(DataError, match="max_model_len=30"):
        engine.generate_ids([list(range(5, 35))], SamplingParams(max_tokens=4))
    with pytest.raises(DataError, match="empty prompt"):
        engine.generate_ids([[]], SamplingParams(max_tokens=4))
    # a prompt one token short of max_model_len is the adapter's to pass: it reaches vLLM with
    # the request's max_tokens unclipped (cutting the response at max_model_len is vLLM's job)
    engine.generate_ids([list(range(5, 34))], SamplingParams(max_tokens=10))
    call = engine.llm.generate_calls[-1]
    assert [sp.max_tokens for sp in call["sampling_params"]] == [10]
    assert [len(p["prompt_token_ids"]) for p in call["prompts"]] == [29]
    assert engine.generate_ids([], SamplingParams()) == []


def test_without_vllm_build_engine_says_it_is_not_installed(monkeypatch, model_dir):
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError, as here
    with pytest.raises(EngineUnavailable, match="vLLM is not installed; install rft-studio"):
        build_engine("vllm", str(model_dir))
    assert vllm_usable() is False


def test_without_flashinfer_the_engine_uses_vllms_own_sampler(fake_vllm, model_dir, monkeypatch):
    import importlib.util
    import os

    assert importlib.util.find_spec("flashinfer") is None  # as on the lent H200's stack
    # vLLM 0.26 as it behaves with its FlashInfer sampler asked for and no flashinfer package
    monkeypatch.setenv("VLLM_USE_FLASHINFER_SAMPLER", "1")
    with pytest.raises(ModuleNotFoundError, match="flashinfer"):
        vllm_engine(model_dir)
    # unset: the adapter picks vLLM's own sampler, and the engine starts and generates
    monkeypatch.delenv("VLLM_USE_FLASHINFER_SAMPLER")
    engine = vllm_engine(model_dir)
    assert os.environ["VLLM_USE_FLASHINFER_SAMPLER"] == "0"
    groups = engine.generate_ids([[40, 41]], SamplingParams(n=2, max_tokens=3))
    assert [len(g) for g in groups] == [2]
