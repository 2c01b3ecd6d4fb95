"""PolicyUpdater on a tiny random Qwen2 (hidden 64, 2 layers, byte-level vocab), fp32 CPU."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from policy_rollouts import CONVERSATIONS, algorithm, rollout
from tiny_lm import TINY_SHAPE, build_tiny_model

from rft_core.experience import Experience
from rft_core.messages import experiences_from_messages
from rft_core.rollout import SamplingParams, build_engine
from rft_core.trainer.batching import response_blocks
from rft_core.trainer.forward import shares_prefix
from rft_core.trainer.optimizer import build_optimizer, lr_factor
from rft_core.trainer.policy import PolicyUpdater


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def sequence_logprob(trainer: PolicyUpdater, experiences: list[Experience]) -> list[float]:
    return [sum(lp) for lp in trainer.logprobs_of(experiences)]


def test_on_policy_ratio_is_one_with_engine_logprobs(model_dir):
    experiences = rollout(model_dir, temperature=0.8)
    trainer = PolicyUpdater(model_dir, algorithm(), temperature=0.8, micro_batch_size=5)
    recomputed = trainer.logprobs_of(experiences)
    for exp, lp in zip(experiences, recomputed, strict=True):
        torch.testing.assert_close(torch.tensor(lp), torch.tensor(exp.logprobs), atol=1e-4, rtol=0)
    metrics = trainer.train_step(experiences)
    assert metrics["actor/pg_clipfrac"] == 0.0
    assert abs(metrics["actor/ppo_kl"]) < 1e-5
    # ratio 1 and mean advantage 0 over the tokens: pg_loss = -mean(A) over tokens
    tokens = [len(e.response_ids) for e in experiences]
    expected = -sum(e.advantage * n for e, n in zip(experiences, tokens, strict=True)) / sum(tokens)
    assert metrics["actor/pg_loss"] == pytest.approx(expected, abs=1e-5)
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-9)  # policy == reference
    assert metrics["response_length/max"] == 12.0
    assert 0 < metrics["actor/entropy"] < math.log(len(trainer.tokenizer)) + 1e-4
    assert metrics["perf/throughput"] > 0 and metrics["actor/lr"] == 1e-3


def test_a_positive_advantage_raises_that_responses_logprob(model_dir):
    experiences = rollout(model_dir, n=2)
    trainer = PolicyUpdater(model_dir, algorithm(lr=1e-2), temperature=0.8)
    before = sequence_logprob(trainer, experiences)
    trainer.train_step(experiences)
    after = sequence_logprob(trainer, experiences)
    for exp, b, a in zip(experiences, before, after, strict=True):
        assert (a > b) if exp.advantage > 0 else (a < b), (exp.advantage, b, a)


def test_trainer_computes_group_advantages_when_the_explorer_did_not(model_dir):
    experiences = rollout(model_dir, n=2)
    for i, exp in enumerate(experiences):
        exp.advantage = None
        exp.reward = float(i % 2)  # groups of two: rewards (0, 1) -> advantages (-1/√2·…, +)
    trainer = PolicyUpdater(model_dir, algorithm(), temperature=0.8)
    metrics = trainer.train_step(experiences)
    # GRPO: (r - mean) / (std + 1e-6), unbiased std of (0, 1) = 1/√2 -> ±0.7071
    tokens = [len(e.response_ids) for e in experiences]
    signed = [(0.5 / (math.sqrt(0.5) + 1e-6)) * (1 if e.reward else -1) for e in experiences]
    expected = sum(a * n for a, n in zip(signed, tokens, strict=True)) / sum(tokens)
    assert metrics["critic/advantages/mean"] == pytest.approx(expected, abs=1e-5)
    assert metrics["critic/rewards/mean"] == 0.5


@pytest.mark.parametrize(
    "mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
)
def test_gradient_accumulation_equals_one_big_batch(model_dir, mode):
    experiences = rollout(model_dir, n=3)
    for i, exp in enumerate(experiences):
        exp.advantage = [0.5, -1.0, 2.0][i % 3]
    cfg = dict(
        loss_agg_mode=mode,
        optimizer={"optimizer_type": "sgd", "weight_decay": 0.0},
        kl_loss_fn_args={"kl_coef": 0.1},
        entropy_loss_fn_args={"entropy_coef": 0.01},
    )
    results = []
    for micro in (2, 9):  # 9 rollouts: 5 micro-batches vs 1
        trainer = PolicyUpdater(
            model_dir,
            algorithm(lr=1.0, **cfg),
            micro_batch_size=micro,
            grad_clip=1e9,
            temperature=0.8,
        )
        start = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        metrics = trainer.train_step(experiences)
        delta = {k: trainer.model.state_dict()[k] - v for k, v in start.items()}
        results.append((metrics, delta))
    (m_small, d_small), (m_big, d_big) = results
    assert float(d_big["model.norm.weight"].abs().sum()) > 0
    for name in d_big:
        torch.testing.assert_close(d_small[name], d_big[name], atol=2e-6, rtol=1e-4)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        assert m_small[key] == pytest.approx(m_big[key], rel=1e-4, abs=1e-6), key


def sft_rows():
    return [
        {
            "messages": [
                {"role": "user", "content": f"{a}+{b}=?"},
                {"role": "assistant", "content": f"<answer>{a + b}</answer>"},
            ]
        }
        for a, b in [(1, 2), (3, 4), (10, 5), (7, 7), (2, 9), (6, 3)]
    ]


def test_sft_masks_all_but_the_assistant_turns(model_dir):
    trainer = PolicyUpdater(model_dir, algorithm("sft"))
    rows = [
        {
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "1+2=?"},
                {"role": "assistant", "content": "3"},
                {"role": "user", "content": "and 2+2?"},
                {"role": "assistant", "content": "4"},
            ]
        }
    ]
    (exp,) = experiences_from_messages(rows, trainer.tokenizer, max_len=200)
    tok = trainer.tokenizer
    assert tok.decode(exp.prompt_ids).endswith("<|im_start|>assistant\n")
    trained = [t for t, m in zip(exp.response_ids, exp.action_mask, strict=True) if m]
    masked = [t for t, m in zip(exp.response_ids, exp.action_mask, strict=True) if not m]
    assert tok.decode(trained) == "3<|im_end|>\n4<|im_end|>\n"
    assert tok.decode(masked) == "<|im_start|>user\nand 2+2?<|im_end|>\n<|im_start|>assistant\n"
    # truncation keeps the prompt and cuts the response
    (short,) = experiences_from_messages(rows, tok, max_len=len(exp.prompt_ids) + 1)
    assert short.response_ids == exp.response_ids[:1] and short.truncated


def test_sft_loss_decreases_on_one_batch(model_dir):
    trainer = PolicyUpdater(model_dir, algorithm("sft", lr=5e-3), micro_batch_size=4)
    experiences = experiences_from_messages(sft_rows(), trainer.tokenizer, max_len=128)
    losses = [trainer.train_step(experiences)["actor/sft_loss"] for _ in range(6)]
    assert losses[0] == pytest.approx(
        math.log(len(trainer.tokenizer)), abs=0.3
    )  # random init ≈ uniform
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses
    assert losses[-1] < 0.7 * losses[0]
    assert trainer.ref_model is None  # sft needs no reference model


def _top1_share(model, experiences: list[Experience]) -> float:
    """The share of trained response tokens that are ``model``'s argmax guess, from full
    logits, one experience at a time."""
    hits = total = 0
    with torch.no_grad():
        for e in experiences:
            ids = torch.tensor([e.prompt_ids + e.response_ids])
            logits = model(input_ids=ids).logits[0]
            guesses = logits[len(e.prompt_ids) - 1 : -1].argmax(-1).tolist()
            for guess, token, trained in zip(guesses, e.response_ids, e.action_mask, strict=True):
                if trained:
                    hits += guess == token
                    total += 1
    return hits / total


def test_sft_reports_its_token_accuracy_and_no_reward(model_dir):
    trainer = PolicyUpdater(model_dir, algorithm("sft", lr=5e-3), micro_batch_size=4)
    experiences = experiences_from_messages(sft_rows(), trainer.tokenizer, max_len=128)
    accuracies = []
    for _ in range(6):
        expected = _top1_share(trainer.model, experiences)  # the model the step's forward sees
        metrics = trainer.train_step(experiences)
        assert metrics["actor/sft_token_accuracy"] == pytest.approx(expected, abs=1e-6)
        accuracies.append(metrics["actor/sft_token_accuracy"])
        # dataset rows carry no reward: a flat 0 would pass for one on the page
        assert "critic/rewards/mean" not in metrics
    assert accuracies[-1] > accuracies[0], accuracies


def test_dpo_prefers_the_chosen_response(model_dir):
    trainer = PolicyUpdater(model_dir, algorithm("dpo", lr=5e-3), micro_batch_size=4)
    rows = [
        {"prompt": f"{a}+{b}=?", "chosen": str(a + b), "rejected": str(a + b + 1)}
        for a, b in [(1, 2), (3, 4), (5, 1), (2, 2)]
    ]
    experiences = experiences_from_messages(rows, trainer.tokenizer, max_len=64)
    first = trainer.train_step(experiences)
    assert first["actor/dpo_loss"] == pytest.approx(math.log(2), abs=1e-5)  # policy == ref
    for _ in range(4):
        last = trainer.train_step(experiences)
    assert last["actor/dpo_loss"] < first["actor/dpo_loss"]
    assert last["actor/dpo_accuracy"] == 1.0
    assert "critic/rewards/mean" not in last


@pytest.mark.parametrize("kind", ["ppo", "reinforceplusplus"])
def test_token_level_algorithms_take_a_step(model_dir, kind):
    experiences = rollout(model_dir, n=2)
    for exp in experiences:
        exp.advantage = None
    cfg = algorithm(kind, kl_penalty_fn="k1", kl_penalty_fn_args={"kl_coef": 0.05})
    trainer = PolicyUpdater(model_dir, cfg, temperature=0.8, micro_batch_size=4)
    metrics = trainer.train_step(experiences)
    # whitened token advantages have mean 0 over the batch's tokens
    assert metrics["critic/advantages/mean"] == pytest.approx(0.0, abs=1e-5)
    assert metrics["actor/kl_penalty"] == pytest.approx(0.0, abs=1e-6)  # rollout == reference
    assert (trainer.critic is not None) == (kind == "ppo")
    if kind == "ppo":
        assert metrics["critic/vf_loss"] > 0


def test_save_and_load_restore_optimizer_and_schedule(model_dir, tmp_path):
    experiences = rollout(model_dir, n=2)
    cfg = algorithm(
        lr=1e-2,
        optimizer={"lr_scheduler_type": "cosine", "lr_warmup_steps": 1, "min_lr_ratio": 0.1},
    )
    first = PolicyUpdater(model_dir, cfg, total_steps=5, temperature=0.8)
    for _ in range(2):
        first.train_step(experiences)
    first.save(tmp_path, 2, save_hf=True)
    third = first.train_step(experiences)
    reference = first.state_dict_for_sync()

    resumed = PolicyUpdater(model_dir, cfg, total_steps=5, temperature=0.8, seed=99)
    assert resumed.load(tmp_path, 2) == 2
    again = resumed.train_step(experiences)
    assert (
        again["actor/lr"]
        == third["actor/lr"]
        == pytest.approx(1e-2 * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 1 / 4))))
    )
    assert again["actor/pg_loss"] == pytest.approx(third["actor/pg_loss"], abs=1e-6)
    for name, tensor in resumed.state_dict_for_sync().items():
        torch.testing.assert_close(tensor, reference[name], atol=1e-6, rtol=0)
    assert (tmp_path / "global_step_2" / "actor" / "huggingface" / "config.json").exists()


def test_hf_weights_join_a_saved_checkpoint_without_rewriting_its_shards(tmp_path):
    from transformers import AutoModelForCausalLM

    # a model dir that carries the slow-tokenizer files of a Qwen2.5 download
    base = build_tiny_model(tmp_path / "base")
    (base / "vocab.json").write_text('{"a": 0}')
    (base / "merges.txt").write_text("#version: 0.2\n")
    trainer = PolicyUpdater(str(base), algorithm(), temperature=0.8)
    trainer.save(tmp_path / "job", 3, save_hf=False)
    actor = tmp_path / "job" / "global_step_3" / "actor"
    hf = actor / "huggingface"
    assert (hf / "vocab.json").read_text() == '{"a": 0}' and (hf / "merges.txt").exists()
    assert not (hf / "model.safetensors").exists()
    shard = actor / "model_world_size_1_rank_0.pt"
    before = shard.stat().st_mtime_ns
    trainer.add_hf_weights(tmp_path / "job", 3)
    assert shard.stat().st_mtime_ns == before  # the shards were not written again
    loaded = AutoModelForCausalLM.from_pretrained(hf).state_dict()
    for name, tensor in trainer.state_dict_for_sync().items():
        if name in loaded:
            torch.testing.assert_close(loaded[name], tensor)


def test_lr_schedule_numbers():
    f = lambda s, kind: lr_factor(s, warmup=2, total=10, kind=kind, min_ratio=0.2)  # noqa: E731
    assert [f(s, "constant") for s in (0, 1, 2, 9)] == [0.5, 1.0, 1.0, 1.0]
    # linear after warmup: 1 - 0.8 * (s - 2) / 8
    assert [f(s, "linear") for s in (2, 6, 10)] == pytest.approx([1.0, 0.6, 0.2])
    assert f(6, "cosine") == pytest.approx(0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi / 2)))


@pytest.mark.parametrize("kind", ["adamw", "adam"])
def test_adam_on_the_cpu_is_the_per_tensor_loop_the_demo_was_calibrated_on(kind):
    """Fused Adam on the CPU moved where the demo's SFT warmup lands and cost GRPO most of its
    gain (rft_core/trainer/optimizer.py says by how much): on the CPU the optimizer is torch's
    per-tensor loop, bit for bit."""
    params = [torch.nn.Parameter(torch.randn(4, 3)) for _ in range(2)]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    settings = dict(optimizer_type=kind, lr=0.1, weight_decay=0.01, betas=[0.9, 0.999])
    built = build_optimizer(params, settings, torch.device("cpu"))
    plain = (torch.optim.AdamW if kind == "adamw" else torch.optim.Adam)(
        twins, lr=0.1, weight_decay=0.01, betas=(0.9, 0.999), foreach=False
    )
    assert not built.defaults["fused"] and not built.defaults["foreach"]
    for _ in range(3):
        for p, q in zip(params, twins, strict=True):
            p.grad = q.grad = torch.full_like(p, 0.5) * p.detach()
        built.step()
        plain.step()
    for p, q in zip(params, twins, strict=True):
        assert torch.equal(p, q)


def test_weights_sync_into_the_engine(model_dir):
    experiences = rollout(model_dir, n=2)
    trainer = PolicyUpdater(model_dir, algorithm(lr=1e-2), temperature=0.8)
    trainer.train_step(experiences)
    engine = build_engine("hf", model_dir)
    engine.load_weights(trainer.state_dict_for_sync(), version=1)
    out = engine.generate_ids(
        [experiences[0].prompt_ids], SamplingParams(temperature=0.8, max_tokens=4)
    )
    new = trainer.logprobs_of(
        [Experience(prompt_ids=experiences[0].prompt_ids, response_ids=out[0][0].response_ids)]
    )[0]
    torch.testing.assert_close(
        torch.tensor(out[0][0].logprobs), torch.tensor(new), atol=1e-4, rtol=0
    )


def mixed_prompt_batch(model_dir: str) -> list[Experience]:
    """Groups of 4 (three prompts of different lengths) plus two prompts that appear once;
    responses cut to lengths from 11 to 40 tokens, one with masked tokens."""
    experiences = rollout(model_dir, n=4, max_tokens=40)
    engine = build_engine("hf", model_dir, seed=2)
    singles = engine.chat(
        [
            [{"role": "user", "content": "a much longer single question: 7*8+1=?"}],
            [CONVERSATIONS[0][0] | {"content": "19-4=?"}],
        ],
        SamplingParams(n=1, temperature=0.8, max_tokens=40),
    )
    for group in singles:
        gen = group[0]
        experiences.append(Experience(gen.prompt_ids, gen.response_ids, gen.logprobs))
    for i, exp in enumerate(experiences):
        keep = 40 - (i * 13) % 30  # 40, 27, 14, 31, 18, ... tokens
        exp.response_ids, exp.logprobs = exp.response_ids[:keep], exp.logprobs[:keep]
        exp.advantage = [0.5, -1.0, 2.0, -0.3][i % 4]
    experiences[1].action_mask = [1, 0] * (len(experiences[1].response_ids) // 2) + [1] * (
        len(experiences[1].response_ids) % 2
    )
    return experiences


def test_shared_prompt_prefix_gives_the_plain_logprobs_and_gradients(model_dir):
    experiences = mixed_prompt_batch(model_dir)
    trainer = PolicyUpdater(model_dir, algorithm(), temperature=0.8, micro_batch_size=None)
    (mb,) = trainer._micro_batches(experiences)
    prefix = mb.shared_prefix
    assert prefix is not None and shares_prefix(trainer.model)
    assert prefix.input_ids.shape[0] == 5 < len(experiences) == 14  # 3 groups + 2 single prompts
    assert len({len(e.prompt_ids) for e in experiences}) == 5
    assert len({len(e.response_ids) for e in experiences}) > 3
    assert len(prefix.blocks) > 1  # rows of short responses run as a block of their own
    plain = dataclasses.replace(mb, shared_prefix=None)
    weights = torch.linspace(-1.0, 1.0, mb.mask.numel()).view_as(mb.mask)
    results = []
    for batch in (plain, mb):
        trainer.model.zero_grad()
        logp, _ = trainer._logprobs(trainer.model, batch)
        (logp * batch.mask * weights).sum().backward()
        grads = {n: p.grad.clone() for n, p in trainer.model.named_parameters()}
        results.append((logp.detach() * batch.mask, grads))
    (logp_plain, grads_plain), (logp_shared, grads_shared) = results
    torch.testing.assert_close(logp_shared, logp_plain, atol=2e-6, rtol=0)
    for name, grad in grads_plain.items():
        assert grad.abs().sum() > 0, name
        # 2e-6: the chunked head sums its weight gradient per forward call (one per block)
        torch.testing.assert_close(grads_shared[name], grad, atol=2e-6, rtol=1e-4)
    # the engine's log-probs, per row, on the shared layout
    for b, row in enumerate(mb.rows):
        n = len(experiences[row].response_ids)
        got = logp_shared[b, mb.response_width - n :] * mb.mask[b, mb.response_width - n :]
        want = torch.tensor(experiences[row].logprobs) * mb.mask[b, mb.response_width - n :]
        torch.testing.assert_close(got, want, atol=1e-4, rtol=0)


def test_train_step_is_the_same_with_and_without_the_shared_prefix(model_dir):
    experiences = mixed_prompt_batch(model_dir)
    cfg = dict(
        kl_loss_fn_args={"kl_coef": 0.1},
        entropy_loss_fn_args={"entropy_coef": 0.01},
        # SGD: Adam's g / sqrt(v) turns a 1e-7 gradient difference on a ~0 gradient into lr
        optimizer={"optimizer_type": "sgd", "weight_decay": 0.0},
    )
    outcomes = []
    for share in (False, True):
        trainer = PolicyUpdater(
            model_dir,
            algorithm(lr=0.5, **cfg),
            temperature=0.8,
            micro_batch_size=8,
            share_prompt_prefix=share,
        )
        shared = [mb.shared_prefix is not None for mb in trainer._micro_batches(experiences)]
        assert shared == [True, False]  # 14 rows in micro-batches of 8: one on each layout
        first = trainer.train_step(experiences)
        second = trainer.train_step(experiences)  # policy != reference now: a real KL term
        outcomes.append((first, second, trainer.state_dict_for_sync()))
    (f_plain, s_plain, w_plain), (f_shared, s_shared, w_shared) = outcomes
    assert s_plain["actor/kl_loss"] > 1e-6
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/grad_norm"):
        for plain, shared in ((f_plain, f_shared), (s_plain, s_shared)):
            assert shared[key] == pytest.approx(plain[key], rel=1e-4, abs=1e-6), key
    for name, tensor in w_plain.items():
        torch.testing.assert_close(w_shared[name], tensor, atol=1e-5, rtol=1e-4)


def test_the_plain_layout_serves_unique_prompts_and_checkpointed_models(model_dir, tmp_path):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    experiences = rollout(model_dir, n=1)  # three different prompts
    trainer = PolicyUpdater(model_dir, algorithm(), gradient_checkpointing=True)
    (mb,) = trainer._micro_batches(experiences)
    assert mb.shared_prefix is None
    (mb,) = trainer._micro_batches(rollout(model_dir, n=2))
    assert mb.shared_prefix is not None
    trainer.model.train()
    assert not shares_prefix(trainer.model)  # transformers drops the cache under checkpointing
    trainer.model.eval()
    assert shares_prefix(trainer.model)
    metrics = trainer.train_step(rollout(model_dir, n=2))
    assert metrics["actor/pg_clipfrac"] == 0.0
    sliding = Qwen2Config(
        **TINY_SHAPE, vocab_size=300, use_sliding_window=True, sliding_window=8, max_window_layers=0
    )
    assert not shares_prefix(Qwen2ForCausalLM(sliding).eval())


def test_response_blocks_split_where_padding_outweighs_a_forward():
    lengths = [1, 4, 9, 21, 33, 40, 46] + [48] * 10
    # longest first, one block pads every row to 49. Cutting before length L saves
    # (rows from there on) × (48 - L): 46 → 7·2, 40 → 6·8, 33 → 5·15, 21 → 4·27, 9 → 3·39 = 117,
    # 4 → 2·44, 1 → 1·47. The best, 117, beats the overhead of 64; no cut inside either part
    # saves more than 30 (33 → 2·15 in the first, 4 → 2·5 in the second).
    expected = [list(range(7, 17)) + [6, 5, 4, 3], [2, 1, 0]]
    assert response_blocks(lengths, max_blocks=4, overhead_tokens=64) == expected
    assert response_blocks(lengths, max_blocks=4, overhead_tokens=120) == [list(range(17))]
    assert response_blocks(lengths, max_blocks=1) == [list(range(17))]
    assert response_blocks([12, 11, 12, 10], overhead_tokens=64) == [[0, 1, 2, 3]]
    assert len(response_blocks(lengths, max_blocks=4, overhead_tokens=0)) == 4


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
def test_masked_rows_count_as_dropped_and_a_fully_masked_batch_changes_nothing(model_dir, mode):
    # groups the explorer filtered stay in a mode-both step with every token masked: the
    # update must equal the one without them, in every aggregation mode
    experiences = rollout(model_dir, n=3)
    for i, exp in enumerate(experiences):
        exp.advantage = [0.5, -1.0, 2.0][i % 3]
    kept, masked = experiences[:6], experiences[6:]
    for exp in masked:
        exp.action_mask = [0] * len(exp.response_ids)
    cfg = dict(loss_agg_mode=mode, optimizer={"optimizer_type": "sgd", "weight_decay": 0.0})
    results = []
    for batch in (kept, kept + masked):
        trainer = PolicyUpdater(model_dir, algorithm(lr=1.0, **cfg), grad_clip=1e9, temperature=0.8)
        metrics = trainer.train_step(batch)
        results.append((metrics, trainer.state_dict_for_sync()))
    (m_kept, w_kept), (m_all, w_all) = results
    for name in w_kept:
        torch.testing.assert_close(w_all[name], w_kept[name], atol=2e-6, rtol=1e-4)
    for key in ("actor/pg_loss", "critic/rewards/mean", "response_length/mean"):
        assert m_all[key] == pytest.approx(m_kept[key], rel=1e-5, abs=1e-7), key
    # nothing to train on: no update at all (AdamW would still decay the weights)
    trainer = PolicyUpdater(model_dir, algorithm(lr=1e-2), temperature=0.8)
    before = trainer.state_dict_for_sync()
    trainer.train_step(masked)
    for name, value in trainer.state_dict_for_sync().items():
        assert torch.equal(value, before[name]), name
