"""The hf rollout engine on a tiny random Qwen2 model (fp32, CPU)."""

from __future__ import annotations

import contextlib

import pytest
import torch
from tiny_lm import build_tiny_model, build_tokenizer
from transformers import AttentionInterface

from rft_core import modeling
from rft_core.errors import ConfigError, DataError, EngineUnavailable
from rft_core.modeling import token_logprobs
from rft_core.rollout import SamplingParams, build_engine, decode_step, hf, shared_prefix
from rft_core.rollout.hf import HFRolloutEngine, filter_logits

CONVERSATIONS = [
    [{"role": "user", "content": "1+2=?"}],
    [{"role": "system", "content": "be brief"}, {"role": "user", "content": "what is 12*3?"}],
    [{"role": "user", "content": "hi"}],
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


@pytest.fixture()
def engine(model_dir) -> HFRolloutEngine:
    return build_engine("hf", str(model_dir), seed=3)


def teacher_forced_logprobs(engine, prompt_ids, response_ids, temperature):
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0]
    start = len(prompt_ids) - 1
    return token_logprobs(
        logits[start : start + len(response_ids)], torch.tensor(response_ids), temperature
    )


def test_logprobs_match_a_teacher_forced_forward(engine):
    # top-k/top-p change what can be sampled but not the log-prob convention (module docstring)
    params = SamplingParams(n=2, temperature=0.7, top_p=0.9, top_k=20, max_tokens=16)
    groups = engine.chat(CONVERSATIONS, params)
    checked = 0
    for group in groups:
        for gen in group:
            assert len(gen.logprobs) == len(gen.response_ids) > 0
            expected = teacher_forced_logprobs(engine, gen.prompt_ids, gen.response_ids, 0.7)
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
            checked += 1
    assert checked == 6
    # prompts of different lengths were left-padded into one batch
    assert len({len(g[0].prompt_ids) for g in groups}) == 3


def test_n_samples_per_prompt_are_distinct_draws(engine):
    groups = engine.chat(CONVERSATIONS[:2], SamplingParams(n=4, temperature=1.0, max_tokens=12))
    assert [len(g) for g in groups] == [4, 4]
    for group in groups:
        assert len({tuple(g.response_ids) for g in group}) > 1
        assert all(g.prompt_ids == group[0].prompt_ids for g in group)


def test_greedy_is_deterministic_and_takes_the_argmax(engine):
    params = SamplingParams(n=2, temperature=0.0, max_tokens=10)
    first = engine.chat(CONVERSATIONS, params)
    second = engine.chat(CONVERSATIONS, params)
    for a, b in zip(first, second, strict=True):
        assert a[0].response_ids == a[1].response_ids == b[0].response_ids
    gen = first[0][0]
    ids = torch.tensor([gen.prompt_ids + gen.response_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0]
    start = len(gen.prompt_ids) - 1
    argmax = logits[start : start + len(gen.response_ids)].argmax(-1).tolist()
    assert argmax == gen.response_ids


def test_seeded_sampling_is_reproducible(engine):
    same = [
        engine.chat(CONVERSATIONS, SamplingParams(n=2, max_tokens=8, seed=11)) for _ in range(2)
    ]
    other = engine.chat(CONVERSATIONS, SamplingParams(n=2, max_tokens=8, seed=12))
    ids = [[g.response_ids for grp in run for g in grp] for run in [*same, other]]
    assert ids[0] == ids[1]
    assert ids[0] != ids[2]


def test_stops_at_eos_and_keeps_the_eos_token(engine):
    params = SamplingParams(n=1, temperature=0.0, max_tokens=12)
    free = engine.chat(CONVERSATIONS, params)
    assert all(g[0].finish_reason == "length" and len(g[0].response_ids) == 12 for g in free)
    # make the 4th greedy token of the first prompt an end-of-sequence token
    stop_token = free[0][0].response_ids[3]
    engine.eos_token_ids = {stop_token}
    stopped = engine.generate_ids([g[0].prompt_ids for g in free], params)
    first = stopped[0][0]
    cut = free[0][0].response_ids.index(stop_token) + 1
    assert first.finish_reason == "stop"
    assert first.response_ids == free[0][0].response_ids[:cut]
    assert len(first.logprobs) == cut
    for before, after in zip(free[1:], stopped[1:], strict=True):
        resp = before[0].response_ids
        if stop_token in resp:
            assert after[0].finish_reason == "stop"
            assert after[0].response_ids == resp[: resp.index(stop_token) + 1]
        else:
            assert after[0].finish_reason == "length"
            assert after[0].response_ids == resp


def test_load_weights_changes_outputs_and_sets_version(engine):
    params = SamplingParams(n=1, temperature=0.0, max_tokens=10)
    before = engine.chat(CONVERSATIONS, params)
    torch.manual_seed(0)
    new = {k: v + 0.5 * torch.randn_like(v) for k, v in engine.state_dict().items()}
    engine.load_weights(new, version=7)
    assert engine.model_version == 7
    after = engine.chat(CONVERSATIONS, params)
    assert [g[0].response_ids for g in before] != [g[0].response_ids for g in after]
    assert after[0][0].extra["model_version"] == 7
    torch.testing.assert_close(engine.model.model.norm.weight, new["model.norm.weight"])


def test_max_model_len_caps_the_response_and_rejects_long_prompts(model_dir):
    engine = build_engine("hf", str(model_dir), max_model_len=30)
    prompt = engine.encode_chat(CONVERSATIONS[0])
    out = engine.generate_ids([prompt], SamplingParams(temperature=0, max_tokens=50))
    assert len(prompt) + len(out[0][0].response_ids) == 30
    with pytest.raises(DataError, match="max_model_len=30"):
        engine.generate_ids([list(range(5, 40))], SamplingParams(max_tokens=4))


def test_long_prompts_keep_their_end_and_each_row_has_its_own_budget(model_dir, caplog):
    engine = build_engine("hf", str(model_dir), max_model_len=40, max_prompt_tokens=16)
    engine.eos_token_ids = set()  # responses run to their budget
    short, long = list(range(5, 13)), list(range(5, 35))  # 8 and 30 tokens
    with caplog.at_level("WARNING"):
        out = engine.generate_ids([short, long], SamplingParams(temperature=0, max_tokens=30))
    assert "1 prompt(s) of up to 30 tokens truncated to model.max_prompt_tokens=16" in caplog.text
    assert out[0][0].prompt_ids == short and out[1][0].prompt_ids == long[-16:]
    # the short prompt is not held to the long one's room: 30 = max_tokens, 24 = 40 - 16
    assert [len(g[0].response_ids) for g in out] == [30, 24]
    assert [g[0].finish_reason for g in out] == ["length", "length"]


def test_a_finished_row_left_in_the_batch_stays_inside_learned_positions(tmp_path):
    # GPT-2 learns 40 positions; 15 short rows keep a finished long row in the batch, unread,
    # while they go on: its positions must not run past the table (an IndexError before)
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = build_tokenizer()
    config = GPT2Config(
        vocab_size=len(tok),
        n_positions=40,
        n_embd=64,
        n_layer=2,
        n_head=4,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(tmp_path / "gpt2")
    tok.save_pretrained(tmp_path / "gpt2")
    engine = build_engine("hf", str(tmp_path / "gpt2"), max_model_len=40)
    engine.eos_token_ids = set()
    prompts = [list(range(5, 13))] * 15 + [list(range(5, 35))]
    out = engine.generate_ids(prompts, SamplingParams(temperature=0, max_tokens=30))
    assert [len(g[0].response_ids) for g in out] == [30] * 15 + [10]


def test_filter_logits_keeps_top_k_and_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isfinite(filter_logits(logits, 2, 1.0)).tolist() == [[True, True, False, False]]
    # cumulative mass before each token: 0, .5, .8, .95 -> top_p .8 keeps the first two
    assert torch.isfinite(filter_logits(logits, -1, 0.8)).tolist() == [[True, True, False, False]]
    assert torch.isfinite(filter_logits(logits, -1, 0.81)).tolist() == [[True, True, True, False]]


def test_vllm_missing_is_a_clear_error(model_dir):
    with pytest.raises(EngineUnavailable, match="vLLM is not installed; install rft-studio"):
        build_engine("vllm", str(model_dir))
    # auto falls back to hf on a CPU machine
    assert isinstance(build_engine("auto", str(model_dir)), HFRolloutEngine)
    with pytest.raises(ConfigError, match="engine_type"):
        build_engine("sglang", str(model_dir))


def test_each_distinct_prompt_is_prefilled_once(engine):
    prompts = [engine.encode_chat(c) for c in CONVERSATIONS]
    prompts.append(prompts[0])  # the same prompt twice in one call: one prefill row
    batch_sizes = []
    # lm_head sees every forward: the prefill's (last position) and each decoding step's
    hook = engine.model.lm_head.register_forward_pre_hook(
        lambda module, args: batch_sizes.append(args[0].shape[:-1])
    )
    try:
        params = SamplingParams(n=3, temperature=1.0, max_tokens=6, seed=5)
        groups = engine.generate_ids(prompts, params)
    finally:
        hook.remove()
    assert batch_sizes[0] == (3, 1)  # 3 distinct prompts, prefilled
    assert batch_sizes[1] == (12,)  # then 4 prompts × 3 samples decode one token at a time
    assert [len(g) for g in groups] == [3, 3, 3, 3]
    assert len({tuple(g.response_ids) for grp in groups for g in grp}) > 6
    for group, prompt in zip(groups, prompts, strict=True):
        for gen in group:
            assert gen.prompt_ids == prompt
            expected = teacher_forced_logprobs(engine, gen.prompt_ids, gen.response_ids, 1.0)
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)
    again = engine.generate_ids(prompts, params)
    assert [[g.response_ids for g in grp] for grp in again] == [
        [g.response_ids for g in grp] for grp in groups
    ]


@pytest.mark.parametrize("stale_rows", [8, 2])
def test_rows_that_stop_early_leave_the_others_exact(engine, monkeypatch, stale_rows):
    """12 rows: with 8 a finished row leaves the batch at once; with 2 up to 5 finished rows
    decode on, unread, until half the batch has finished."""
    monkeypatch.setattr(hf, "_STALE_ROWS", stale_rows)
    prompts = [engine.encode_chat(c) for c in CONVERSATIONS]
    prompts.append(prompts[1])  # runs of rows: prompts 0, 1, 2, then 1 again
    params = SamplingParams(n=3, temperature=1.0, max_tokens=10, seed=7)
    free = engine.generate_ids(prompts, params)
    # stop at tokens that some samples draw early: rows leave the batch at different steps
    counts: dict[int, int] = {}
    for group in free:
        for gen in group:
            for token in set(gen.response_ids[:6]):
                counts[token] = counts.get(token, 0) + 1
    engine.eos_token_ids = set(sorted(counts, key=counts.get)[-3:])
    groups = engine.generate_ids(prompts, params)
    lengths = [len(g.response_ids) for grp in groups for g in grp]
    assert len(set(lengths)) > 3 and max(lengths) == 10, lengths
    for group, prompt in zip(groups, prompts, strict=True):
        for gen in group:
            expected = teacher_forced_logprobs(engine, prompt, gen.response_ids, 1.0)
            torch.testing.assert_close(torch.tensor(gen.logprobs), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize("fused", [True, False])
def test_decode_step_is_the_models_own_forward(engine, monkeypatch, fused):
    """``DecodeStep`` runs the Qwen2 model's weights itself (fused layers) or its decoder layer
    modules (as for qwen3): the same tokens and log-probs as decoding through ``model(...)``,
    which any other architecture gets."""
    if not fused:
        monkeypatch.setattr(decode_step, "_FUSED_LAYERS", frozenset())
    prompts = [engine.encode_chat(c) for c in CONVERSATIONS]
    params = SamplingParams(n=4, temperature=1.0, max_tokens=12, seed=11)
    steps = []
    of = hf.DecodeStep.of

    def spy(model, positions, attention):
        steps.append(of(model, positions, attention))
        return steps[-1]

    monkeypatch.setattr(hf.DecodeStep, "of", spy)
    fast = engine.generate_ids(prompts, params)
    assert steps and isinstance(steps[0], hf.DecodeStep)
    assert (steps[0].fused is not None) == fused and steps[0].cos is not None
    monkeypatch.setattr(hf.DecodeStep, "of", lambda model, positions, attention: None)
    plain = engine.generate_ids(prompts, params)
    for fast_group, plain_group in zip(fast, plain, strict=True):
        for a, b in zip(fast_group, plain_group, strict=True):
            assert a.response_ids == b.response_ids
            torch.testing.assert_close(
                torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5, rtol=0
            )
    # a model type it does not know keeps the generic forward
    engine.model.config.model_type = "gemma"
    try:
        assert of(engine.model, 64, shared_prefix.shared_prefix_attention) is None
    finally:
        engine.model.config.model_type = "qwen2"


def test_grouped_sdpa_attention_is_transformers_sdpa(engine):
    """On CPU a masked batch runs ``grouped_sdpa_attention`` (key/value heads not repeated):
    logits and gradients as with transformers' own ``sdpa``."""
    model = engine.model
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    ids = torch.tensor([[0, 0, 5, 6, 7, 8], [9, 10, 11, 12, 13, 14]])
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1]])  # left padding: a real mask
    used = []
    grouped = modeling.grouped_sdpa_attention

    def spy(*args, **kwargs):
        used.append(True)
        return grouped(*args, **kwargs)

    AttentionInterface.register(modeling.GROUPED_SDPA_ATTENTION, spy)
    results = []
    try:
        for swap in (False, True):
            model.zero_grad()
            with modeling.cpu_attention(model) if swap else contextlib.nullcontext():
                logits = model(input_ids=ids, attention_mask=mask).logits
            (
                logits[:, 2:] * torch.linspace(-1, 1, logits[:, 2:].numel()).view_as(logits[:, 2:])
            ).sum().backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters()}
            results.append((logits.detach(), grads))
    finally:
        AttentionInterface.register(modeling.GROUPED_SDPA_ATTENTION, grouped)
    assert used and model.config._attn_implementation == "sdpa"  # restored after the block
    (logits_sdpa, grads_sdpa), (logits_grouped, grads_grouped) = results
    torch.testing.assert_close(logits_grouped[:, 2:], logits_sdpa[:, 2:], atol=1e-6, rtol=0)
    for name, grad in grads_sdpa.items():
        torch.testing.assert_close(grads_grouped[name], grad, atol=1e-6, rtol=1e-5)
