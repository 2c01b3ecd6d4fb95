"""Hand-worked values of the round-2 advantage functions (rft_core/algorithms/turn_advantages.py:
step_wise_grpo, gigpo, raft, clipb) and of Clip_B's token filter (rft_core/trainer/step_masks.py),
and the step-wise experiences a multi-turn workflow emits for them (one per turn, the episode's
reward on each, its place in ``info``). The engine of the last test is test_multi_turn's
scripted one (its answers are fixed per turn); the real engine runs them in
test_algorithm_runs_round2.py."""

from __future__ import annotations

import pytest
import torch
from frozen_lake_play import ScriptedEngine, expert, first_grid, lake_task

from rft_core.algorithms.advantages import get_advantage_fn
from rft_core.algorithms.turn_advantages import Turn, turns_of
from rft_core.errors import ConfigError
from rft_core.experience import Experience
from rft_core.trainer.step_masks import clipb_keep
from rft_core.workflows import get
from rft_core.workflows.frozen_lake import shortest_path

EPS = 1e-6
SQRT_HALF = 0.5**0.5  # 0.70710678


def _step_wise(turns, rewards, groups, **args):
    fn = get_advantage_fn("step_wise_grpo")
    return fn.group(torch.tensor(rewards), groups, turns=turns, **args)


# group g1: episode a of two turns (given last turn first: the order is the turns' own),
# episode b of one turn; group g2: episode c of two turns alone in its group
TURNS = [
    Turn("a", 1),
    Turn("a", 0),
    Turn("b", 0),
    Turn("c", 0),
    Turn("c", 1),
]
GROUPS = ["g1", "g1", "g1", "g2", "g2"]
# a's first turn says 0.0: only the LAST turn's reward is the episode's (Trinity's rule)
REWARDS = [1.0, 0.0, 0.0, 0.5, 0.5]


def test_step_wise_grpo_scores_each_episode_by_its_last_turn_and_broadcasts_it():
    adv, keep = _step_wise(TURNS, REWARDS, GROUPS)
    # g1 finals [1, 0]: mean 0.5, unbiased std sqrt(0.5) = 0.7071068
    #   a: 0.5 / (0.7071068 + 1e-6) = 0.7071058, on both its turns; b: -0.7071058
    # g2: one episode: mean 0, std 1: c = 0.5 / (1 + 1e-6) = 0.4999995 on both turns
    a = 0.5 / (SQRT_HALF + EPS)
    c = 0.5 / (1 + EPS)
    assert adv.tolist() == pytest.approx([a, a, -a, c, c], abs=1e-6)
    assert a == pytest.approx(0.7071058, abs=1e-7)
    assert keep.all()


def test_step_wise_grpo_step_norm_divides_by_the_episode_length():
    adv, _ = _step_wise(TURNS, REWARDS, GROUPS, enable_step_norm=True)
    # a and c have two turns: halved; b has one
    a = 0.5 / (SQRT_HALF + EPS)
    c = 0.5 / (1 + EPS)
    assert adv.tolist() == pytest.approx([a / 2, a / 2, -a, c / 2, c / 2], abs=1e-6)


def test_step_wise_grpo_batch_std_and_no_std():
    # batch: std of every episode's final reward [1, 0, 0.5] = 0.5 (unbiased); means per group
    #   a: (1 - 0.5) / 0.500001 = 0.999998; b: -0.999998; c: (0.5 - 0) / 0.500001 = 0.999998
    adv, _ = _step_wise(TURNS, REWARDS, GROUPS, std_cal_level="batch")
    d = 0.5 / (0.5 + EPS)
    assert adv.tolist() == pytest.approx([d, d, -d, d, d], abs=1e-6)
    # none: r - mean only: a 0.5, b -0.5, c 0.5
    adv, _ = _step_wise(TURNS, REWARDS, GROUPS, std_cal_level="none")
    assert adv.tolist() == pytest.approx([0.5, 0.5, -0.5, 0.5, 0.5], abs=1e-7)
    with pytest.raises(ConfigError, match="std_cal_level"):
        _step_wise(TURNS, REWARDS, GROUPS, std_cal_level="token")


def test_step_wise_grpo_std_threshold_drops_flat_groups_and_lone_episodes():
    # g1's std 0.707 > 0.1 stays; g2 has one episode: dropped, every turn of it
    adv, keep = _step_wise(TURNS, REWARDS, GROUPS, std_threshold=0.1)
    assert keep.tolist() == [True, True, True, False, False]
    assert adv.tolist()[3:] == [0.0, 0.0]


def test_without_turns_every_experience_is_an_episode_so_it_is_grpo():
    # no run ids (single-turn workflow): [1, 0] in one group = GRPO's ±0.7071058
    adv, _ = _step_wise(None, [1.0, 0.0], ["g", "g"])
    a = 0.5 / (SQRT_HALF + EPS)
    assert adv.tolist() == pytest.approx([a, -a], abs=1e-6)
    exps = [Experience([1], [2], info={"run_id": "0", "step": 1, "env_state_hash": "s"})]
    exps.append(Experience([1], [2]))
    assert turns_of(exps) == [Turn("0", 1, None, "s"), Turn("#1", 0, None, None)]


def _gigpo(turns, rewards, groups, **args):
    return get_advantage_fn("gigpo").group(torch.tensor(rewards), groups, turns=turns, **args)[0]


# one task, two episodes of two turns; both start in s0, then a is in s1 and b in s2;
# a succeeds (reward 1), b fails (0); sparse rewards: only the last turn's counts
GIG_TURNS = [Turn("a", 0, None, "s0"), Turn("a", 1, None, "s1")]
GIG_TURNS += [Turn("b", 0, None, "s0"), Turn("b", 1, None, "s2")]
GIG_REWARDS = [1.0, 1.0, 0.0, 0.0]


def test_gigpo_adds_the_anchor_state_advantage_to_the_episode_advantage():
    adv = _gigpo(GIG_TURNS, GIG_REWARDS, ["t"] * 4)
    # step rewards a [0, 1], b [0, 0]; returns (gamma 1) a [1, 1], b [0, 0]
    # A_E: episode returns [1, 0], fnorm none: (x - 0.5) / (1 + 1e-6) = ±0.4999995
    # A_S: s0 holds a0 (R 1) and b0 (R 0): ±0.4999995; s1, s2 hold one turn each: 0
    # A = A_E + 1.0 · A_S: a0 0.999999, a1 0.4999995, b0 -0.999999, b1 -0.4999995
    h = 0.5 / (1 + EPS)
    assert adv.tolist() == pytest.approx([2 * h, h, -2 * h, -h], abs=1e-6)


def test_gigpo_discount_omega_and_std_norm():
    # gamma 0.5: a's returns [0.5, 1]; s0 holds [0.5, 0]: ±0.25 / (1 + 1e-6)
    # omega 2: a0 = 0.4999995 + 2 · 0.24999975 = 0.999999
    adv = _gigpo(GIG_TURNS, GIG_REWARDS, ["t"] * 4, gamma=0.5, omega=2.0)
    h, q = 0.5 / (1 + EPS), 0.25 / (1 + EPS)
    assert adv.tolist() == pytest.approx([h + 2 * q, h, -h - 2 * q, -h], abs=1e-6)
    # fnorm std: both normalizations divide by std([1, 0]) = 0.7071068: ±0.7071058 each
    adv = _gigpo(GIG_TURNS, GIG_REWARDS, ["t"] * 4, fnorm="std")
    s = 0.5 / (SQRT_HALF + EPS)
    assert adv.tolist() == pytest.approx([2 * s, s, -2 * s, -s], abs=1e-6)
    with pytest.raises(ConfigError, match="fnorm"):
        _gigpo(GIG_TURNS, GIG_REWARDS, ["t"] * 4, fnorm="mean")


def test_gigpo_uses_dense_step_rewards_where_an_episode_has_them():
    # a's turns say step rewards 0.2 and 0.3 (its experience reward is then unused): total 0.5,
    # returns [0.5, 0.3]; b stays sparse with reward 0: [0, 0]
    # A_E: [0.5, 0] -> ±0.25 / (1 + 1e-6); A_S on s0: [0.5, 0] -> ±0.25 / (1 + 1e-6)
    turns = [Turn("a", 0, 0.2, "s0"), Turn("a", 1, 0.3, "s1")] + GIG_TURNS[2:]
    adv = _gigpo(turns, [9.0, 9.0, 0.0, 0.0], ["t"] * 4)
    q = 0.25 / (1 + EPS)
    assert adv.tolist() == pytest.approx([2 * q, q, -2 * q, -q], abs=1e-6)


def test_gigpo_of_one_episode_keeps_its_raw_return():
    # one episode in its group: mean 0, denominator 1: A_E = 0.8 / (1 + 1e-6); no anchor pairs
    adv = _gigpo([Turn("a", 0, None, "s0")], [0.8], ["t"])
    assert adv.tolist() == pytest.approx([0.8 / (1 + EPS)], abs=1e-7)


def test_raft_keeps_the_rollouts_whose_reward_reaches_the_threshold():
    fn = get_advantage_fn("raft")
    adv, keep = fn.group(torch.tensor([1.0, 0.5, 1.2, 0.99]), ["g"] * 4, reward_threshold=1.0)
    assert keep.tolist() == [True, False, True, False]
    assert adv.tolist() == [1.0, 0.0, 1.0, 0.0]


def test_clipb_sequence_part_is_grpo_and_a_lone_response_keeps_its_reward():
    fn = get_advantage_fn("clipb")
    adv, keep = fn.group(torch.tensor([1.0, 0.0, 2.0]), ["g", "g", "h"], mu=2.5)
    # g: ±0.7071058; h alone: mean 0, std 1: 2 / (1 + 1e-6) = 1.999998
    a = 0.5 / (SQRT_HALF + EPS)
    assert adv.tolist() == pytest.approx([a, -a, 2 / (1 + EPS)], abs=1e-6)
    assert keep.all()


def test_clipb_drops_negative_tokens_far_below_the_mean_signal():
    # p = 1 (log p = 0) on every token, so S = p · (H + log p) = H = [0, 0, 0, 4]
    # mean 1, population var (1 + 1 + 1 + 9) / 4 = 3, std 1.7320508; z = [-1, -1, -1, 3]
    # mu 0.5: a token of negative advantage with z < -0.866 goes: token 0 (A -1, z -1);
    # token 1 (A +1) and token 2 (A 0) stay whatever z; token 3 (A -1, z 3) stays
    logp = torch.zeros(1, 4)
    entropy = torch.tensor([[0.0, 0.0, 0.0, 4.0]])
    adv = torch.tensor([[-1.0, 1.0, 0.0, -1.0]])
    mask = torch.ones(1, 4)
    keep, m = clipb_keep(logp, entropy, adv, mask, mu=0.5)
    assert keep.tolist() == [[0.0, 1.0, 1.0, 1.0]]
    assert m["actor/clipb/frac_clipped"] == pytest.approx(0.25)  # 1 of 4
    assert m["actor/clipb/frac_clipped_neg"] == pytest.approx(0.5)  # 1 of the 2 negatives
    assert m["actor/clipb/frac_clipped_pos"] == pytest.approx(0.0)
    assert m["actor/clipb/ES"] == pytest.approx(1.0)
    assert m["actor/clipb/varS"] == pytest.approx(3.0)
    # mu 2.5: -2.5 · 1.732 = -4.33 < every z: nothing dropped
    keep, _ = clipb_keep(logp, entropy, adv, mask, mu=2.5)
    assert keep.tolist() == [[1.0] * 4]
    # a flat signal (std 0) drops nothing
    keep, _ = clipb_keep(logp, torch.ones(1, 4), adv, mask, mu=0.0)
    assert keep.tolist() == [[1.0] * 4]
    # masked tokens do not count: with token 3 masked S over [0, 0, 0] is flat
    keep, m = clipb_keep(logp, entropy, adv, torch.tensor([[1.0, 1.0, 1.0, 0.0]]), mu=0.5)
    assert keep.tolist() == [[1.0] * 4] and m["actor/clipb/varS"] == 0.0


def test_a_step_wise_frozen_lake_episode_is_one_experience_per_turn():
    tasks = [lake_task(0, seed=1)]
    workflow = get("frozen_lake_workflow")({"max_steps": 6})
    workflow.step_wise = True
    board = workflow.board(tasks[0])
    path = shortest_path(board)

    def script(conversation: str) -> str:
        assert first_grid(board) in conversation
        return expert(board)(conversation)

    engine = ScriptedEngine(script)
    experiences = workflow.run_batch(tasks, engine, repeat_times=2)
    # 2 episodes x len(path) turns, each its own experience
    assert len(experiences) == 2 * len(path)
    tok = engine.tokenizer
    for i, exp in enumerate(experiences):
        run, step = divmod(i, len(path))
        assert exp.info["run_id"] == str(run) and exp.info["step"] == step
        assert exp.info["last_turn"] == (step == len(path) - 1)
        assert exp.reward == 1.0 and exp.metrics["success"] == 1.0  # the episode's, on each
        assert exp.group_id == "lake:0"
        # the response is the turn's own sampled tokens, all trained, with the engine's logprobs
        assert exp.action_mask == [] and exp.logprobs == [-0.1] * len(exp.response_ids)
        assert tok.decode(exp.response_ids).startswith("Go. ```")
        # the prompt is the whole context the turn was sampled from
        assert tok.decode(exp.prompt_ids).count("Current Observation") == step + 1
        # the anchor state: the lake and where P stood before the move
        assert exp.info["env_state_hash"].startswith("/".join(board) + "@")
    row, col = next((r, line.index("S")) for r, line in enumerate(board) if "S" in line)
    assert experiences[0].info["env_state_hash"] == f"{'/'.join(board)}@{row},{col}"
    # both runs start in the same state and walk the same way: equal anchors turn by turn
    states = [e.info["env_state_hash"] for e in experiences]
    assert states[: len(path)] == states[len(path) :]


def test_the_step_wise_demo_config_loads_as_multi_step_grpo(monkeypatch, tmp_path):
    from pathlib import Path

    from rft_core.config import load_config, resolve_stages

    monkeypatch.setenv("RFT_DEMO_DIR", str(tmp_path))
    path = Path(__file__).resolve().parents[3] / "examples/demo/frozen_lake_step_wise_demo.yaml"
    warmup, cfg = resolve_stages(load_config(path))  # the SFT warmup, then the step-wise stage
    assert warmup.algorithm.algorithm_type == "sft"
    a = cfg.algorithm
    assert (a.algorithm_type, a.advantage_fn, a.policy_loss_fn) == (
        "multi_step_grpo",
        "step_wise_grpo",
        "ppo",
    )
    assert cfg.mode == "colocate" and a.repeat_times == 8
    assert cfg.buffer.explorer_input.taskset.default_workflow_type == "frozen_lake_workflow"
