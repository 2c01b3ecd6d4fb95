"""The hf engine's static-cache decoding path (``rft_core.rollout.static_decode``) against its
generic path, on a tiny random Qwen2 model in fp32 on CPU, where the same step runs eagerly
(CUDA graphs are exercised by ``benchmarks/gpu_grpo.py`` on the lent GPU)."""

from __future__ import annotations

import pytest
import torch
from tiny_lm import build_tiny_model

from rft_core.modeling import token_logprobs
from rft_core.rollout import SamplingParams, build_engine, static_decode
from rft_core.rollout.static_decode import StaticDecoder, rows_bucket

PROMPTS = ["1+2=?", "what is 12*3? answer briefly please", "hi"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # 48 positions: long prompts leave their rows less room, so rows end at different steps
    return build_tiny_model(tmp_path_factory.mktemp("tiny"), max_position_embeddings=48)


def engines(model_dir, **kwargs):
    generic = build_engine("hf", str(model_dir), seed=3, static_cache=False, **kwargs)
    static = build_engine("hf", str(model_dir), seed=3, static_cache=True, **kwargs)
    assert generic.static_decoder is None and isinstance(static.static_decoder, StaticDecoder)
    return generic, static


def as_tuples(groups):
    return [[(g.response_ids, g.finish_reason) for g in group] for group in groups]


def test_rows_bucket_is_a_power_of_two_from_eight():
    assert [rows_bucket(n) for n in (1, 8, 9, 16, 17, 256, 257)] == [8, 8, 16, 16, 32, 256, 512]


def test_greedy_gives_the_generic_paths_tokens_and_logprobs_with_rows_compacted(
    model_dir, monkeypatch
):
    monkeypatch.setattr(static_decode, "CHECK_EVERY", 3)  # look (and compact) often
    generic, static = engines(model_dir)
    params = SamplingParams(n=3, temperature=0.0, max_tokens=40)
    want = generic.generate(PROMPTS, params)
    got = static.generate(PROMPTS, params)
    assert as_tuples(got) == as_tuples(want)
    lengths = {len(g.response_ids) for group in want for g in group}
    assert len(lengths) > 1  # rows ended at different steps: the compaction had work to do
    assert static.static_decoder.compactions >= 1
    for got_group, want_group in zip(got, want, strict=True):
        for a, b in zip(got_group, want_group, strict=True):
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
            )
    # a second call reuses the buffers (same bucket and length) and gives the same answer
    buffers = static.static_decoder.buffers
    assert as_tuples(static.generate(PROMPTS, params)) == as_tuples(want)
    assert static.static_decoder.buffers is buffers


def test_sampled_logprobs_follow_the_engines_convention(model_dir):
    _, static = engines(model_dir)
    params = SamplingParams(n=2, temperature=0.7, top_p=0.9, top_k=20, max_tokens=12)
    checked = 0
    for group in static.generate(PROMPTS, params):
        for gen in group:
            ids = torch.tensor([gen.prompt_ids + gen.response_ids])
            with torch.no_grad():
                logits = static.model(input_ids=ids).logits[0]
            start = len(gen.prompt_ids) - 1
            expected = token_logprobs(
                logits[start : start + len(gen.response_ids)], torch.tensor(gen.response_ids), 0.7
            )
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
            checked += 1
    assert checked == 6


def test_seeded_sampling_repeats_and_top_k_one_is_greedy(model_dir):
    _, static = engines(model_dir)
    seeded = SamplingParams(n=4, temperature=1.0, max_tokens=10, seed=11)
    first = as_tuples(static.generate(PROMPTS, seeded))
    assert as_tuples(static.generate(PROMPTS, seeded)) == first
    other = SamplingParams(n=4, temperature=1.0, max_tokens=10, seed=12)
    assert as_tuples(static.generate(PROMPTS, other)) != first
    top1 = SamplingParams(n=2, temperature=1.0, top_k=1, max_tokens=10, seed=5)
    greedy = SamplingParams(n=2, temperature=0.0, max_tokens=10)
    assert as_tuples(static.generate(PROMPTS, top1)) == as_tuples(static.generate(PROMPTS, greedy))


def test_the_first_token_is_drawn_from_the_softmax(model_dir):
    # 4000 draws of one token from one prompt: each token's frequency against its probability
    _, static = engines(model_dir)
    params = SamplingParams(n=4000, temperature=1.0, max_tokens=1, seed=1)
    (group,) = static.generate([PROMPTS[0]], params)
    counts = torch.bincount(
        torch.tensor([g.response_ids[0] for g in group]), minlength=static.model.config.vocab_size
    ).double()
    with torch.no_grad():
        ids = torch.tensor([group[0].prompt_ids])
        probs = torch.softmax(static.model(input_ids=ids).logits[0, -1].double(), -1)
    total_variation = 0.5 * (counts / counts.sum() - probs).abs().sum()
    # a random tiny model spreads its mass over the ~260-token vocabulary: the sampling error of
    # 4000 draws is about 0.09 here; a sampler off by a temperature of 2 is at 0.2 or more
    assert total_variation < 0.13, float(total_variation)
    hot = SamplingParams(n=4000, temperature=3.0, max_tokens=1, seed=1)
    (hot_group,) = static.generate([PROMPTS[0]], hot)
    hot_counts = torch.bincount(
        torch.tensor([g.response_ids[0] for g in hot_group]),
        minlength=static.model.config.vocab_size,
    ).double()
    assert 0.5 * (hot_counts / hot_counts.sum() - probs).abs().sum() > total_variation


def test_ignore_eos_samples_the_full_budget_on_both_paths(model_dir):
    from transformers import AutoModelForCausalLM

    probe, _ = engines(model_dir)
    first = {g.response_ids[0] for group in probe.generate(PROMPTS, SamplingParams(
        n=1, temperature=0.0, max_tokens=1)) for g in group}  # fmt: skip
    built = []
    for static_cache in (False, True):  # each greedy response's first token made an EOS
        model = AutoModelForCausalLM.from_pretrained(model_dir)
        model.generation_config.eos_token_id = sorted(first)
        built.append(build_engine("hf", str(model_dir), static_cache=static_cache, model=model))
    stops = SamplingParams(n=2, temperature=0.0, max_tokens=8)
    full = SamplingParams(n=2, temperature=0.0, max_tokens=8, ignore_eos=True)
    for engine in built:
        stopped = [g for group in engine.generate(PROMPTS, stops) for g in group]
        assert {(len(g.response_ids), g.finish_reason) for g in stopped} == {(1, "stop")}
        forced = [g for group in engine.generate(PROMPTS, full) for g in group]
        assert {(len(g.response_ids), g.finish_reason) for g in forced} == {(8, "length")}


def test_release_memory_drops_the_buffers_and_the_next_call_rebuilds_them(model_dir):
    _, static = engines(model_dir)
    params = SamplingParams(n=2, temperature=0.0, max_tokens=6)
    before = as_tuples(static.generate(PROMPTS, params))
    static.release_memory()
    assert static.static_decoder.buffers is None
    assert as_tuples(static.generate(PROMPTS, params)) == before


def test_weights_loaded_in_place_are_seen_by_the_next_call(model_dir):
    generic, static = engines(model_dir)
    params = SamplingParams(n=1, temperature=0.0, max_tokens=6)
    static.generate(PROMPTS, params)  # buffers (and on CUDA graphs) exist before the update
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in generic.state_dict().items()}
    for engine in (generic, static):
        engine.load_weights(state, version=2)
    assert as_tuples(static.generate(PROMPTS, params)) == as_tuples(
        generic.generate(PROMPTS, params)
    )


def test_fused_projections_share_the_parameters_storage_and_keep_the_forward(model_dir):
    generic, static = engines(model_dir)
    ids = torch.tensor([[5, 9, 14, 3, 7]])
    want = generic.model(input_ids=ids).logits
    layer = static.static_decoder.layers[0]
    attn, mlp = layer.attn, layer.mlp
    assert layer.qkv is not None and layer.qkv_bias is not None and layer.gate_up is not None
    # each projection is a view of the fused rows, in order, with no copy of its own
    q_rows, k_rows = attn.q_proj.weight.shape[0], attn.k_proj.weight.shape[0]
    assert attn.q_proj.weight.data_ptr() == layer.qkv.data_ptr()
    assert torch.equal(layer.qkv[q_rows : q_rows + k_rows], attn.k_proj.weight)
    assert attn.v_proj.bias.data_ptr() == layer.qkv_bias[q_rows + k_rows :].data_ptr()
    assert (
        mlp.up_proj.weight.data_ptr() == layer.gate_up[mlp.gate_proj.weight.shape[0] :].data_ptr()
    )
    # the model's own forward (the prefill) is unchanged, and an update in place reaches both
    torch.testing.assert_close(static.model(input_ids=ids).logits, want, atol=0, rtol=0)
    with torch.no_grad():
        attn.k_proj.weight.add_(1.0)
    assert torch.equal(layer.qkv[q_rows : q_rows + k_rows], attn.k_proj.weight)


def test_a_model_outside_the_plain_stacks_keeps_the_generic_path(tmp_path):
    # sliding-window attention is not a plain full-attention cache
    path = build_tiny_model(
        tmp_path, use_sliding_window=True, sliding_window=8, max_window_layers=0
    )
    engine = build_engine("hf", str(path), seed=0, static_cache=True)
    assert engine.static_decoder is None
    (group,) = engine.generate(["hi"], SamplingParams(n=2, temperature=0.0, max_tokens=4))
    assert all(len(g.response_ids) >= 1 for g in group)
