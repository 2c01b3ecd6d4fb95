"""Multi-turn workflows: an episode of several model turns becomes ONE experience whose
environment tokens are masked out of the loss, and frozen_lake_workflow plays Trinity's
FrozenLake on gymnasium. The engine here is scripted (``frozen_lake_play``: its answers are
fixed per turn) to test the plumbing; the demo model runs it for real in test_frozen_lake_demo.py."""

from __future__ import annotations

import pytest
from frozen_lake_play import ScriptedEngine, expert, first_grid, lake_task

from rft_core.demo import IM_END, build_tokenizer
from rft_core.rollout.base import Generation
from rft_core.trainer.batching import collate, response_mask
from rft_core.workflows import get
from rft_core.workflows.frozen_lake import (
    FrozenLake,
    parse_action,
    random_map,
    shortest_path,
)
from rft_core.workflows.multi_turn import continuation_ids, pack_turns


def gen(prompt: list[int], response: list[int], logprob: float) -> Generation:
    return Generation(prompt, response, [logprob] * len(response), "", "stop")


def test_pack_turns_masks_the_environment_tokens_by_hand():
    # turn 0 sampled [5, 6] after prompt [1, 2]; the engine's turn-1 prompt is the conversation
    # re-rendered: [1, 2, 5, 6] + environment tokens [7, 8, 9]; turn 1 sampled [10]
    turns = [gen([1, 2], [5, 6], -0.5), gen([1, 2, 5, 6, 7, 8, 9], [10], -0.25)]
    prompt, response, logprobs, mask = pack_turns(turns)
    assert prompt == [1, 2]
    assert response == [5, 6, 7, 8, 9, 10]
    assert mask == [1, 1, 0, 0, 0, 1]
    assert logprobs == [-0.5, -0.5, 0.0, 0.0, 0.0, -0.25]


def test_pack_turns_refuses_prompts_that_do_not_extend_the_sampled_tokens():
    # the template closes turn 0 with 4 where the model sampled 6: no exact layout exists
    turns = [gen([1, 2], [5, 6], -0.5), gen([1, 2, 5, 4, 7], [10], -0.25)]
    assert pack_turns(turns) is None


def test_the_trainer_batch_masks_the_environment_tokens():
    turns = [gen([1, 2], [5, 6], -0.5), gen([1, 2, 5, 6, 7, 8, 9], [10], -0.25)]
    prompt, response, _, mask = pack_turns(turns)
    from rft_core.experience import Experience

    exp = Experience(prompt_ids=prompt, response_ids=response, action_mask=mask)
    mb = collate(
        [(prompt, response, response_mask(exp))], [0], 0, __import__("torch").device("cpu")
    )
    assert mb.targets[0].tolist() == [5, 6, 7, 8, 9, 10]
    assert mb.mask[0].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]


def test_a_frozen_lake_episode_runs_one_batched_call_per_turn_and_masks_the_lake():
    tasks = [lake_task(0, seed=1), lake_task(1, seed=2)]
    workflow = get("frozen_lake_workflow")({"max_steps": 6})
    boards = [workflow.board(t) for t in tasks]
    paths = [shortest_path(b) for b in boards]
    assert all(paths) and all(len(p) <= 6 for p in paths)

    def script(conversation: str) -> str:
        # each conversation's map is recognised by its first observation
        for board in boards:
            if first_grid(board) in conversation:
                return expert(board)(conversation)
        raise AssertionError(f"unknown lake in {conversation[:300]!r}")

    engine = ScriptedEngine(script)
    experiences = workflow.run_batch(tasks, engine, repeat_times=2)
    # 4 episodes; every turn sends all live episodes in one call
    assert len(experiences) == 4
    longest = max(len(p) for p in paths)
    assert len(engine.calls) == longest
    assert engine.calls[0] == 4
    tok = engine.tokenizer
    for exp, path in zip(experiences, [paths[0]] * 2 + [paths[1]] * 2, strict=True):
        assert exp.reward == 1.0 and exp.metrics["success"] == 1.0
        assert exp.metrics["env_steps"] == len(path) and exp.info["turns"] == len(path)
        assert exp.info["retokenized"] is False
        assert exp.model_version == 3
        assert len(exp.response_ids) == len(exp.logprobs) == len(exp.action_mask)
        trained = tok.decode(
            [t for t, m in zip(exp.response_ids, exp.action_mask, strict=True) if m]
        )
        masked = tok.decode(
            [t for t, m in zip(exp.response_ids, exp.action_mask, strict=True) if not m]
        )
        # trained: exactly the model's answers and their end tokens; masked: the lake's turns
        assert trained == "".join(f"Go. ```{_name(a)}```{IM_END}" for a in path)
        assert masked.count("Current Observation") == len(path) - 1
        assert "Go." not in masked and "Current Observation" not in trained
        assert masked.startswith("\n<|im_start|>user\nCurrent Observation (1)")
        assert masked.endswith("<|im_start|>assistant\n")
        assert all(lp == 0.0 for lp, m in zip(exp.logprobs, exp.action_mask, strict=True) if not m)
        assert all(lp == -0.1 for lp, m in zip(exp.logprobs, exp.action_mask, strict=True) if m)
        # the prompt is the first turn's: system prompt and the first observation
        assert tok.decode(exp.prompt_ids).count("Current Observation (0)") == 1
    assert [e.group_id for e in experiences] == ["lake:0", "lake:0", "lake:1", "lake:1"]


def _name(action: int) -> str:
    return {1: "Left", 2: "Down", 3: "Right", 4: "Up"}[action]


def test_invalid_answers_keep_the_player_and_run_out_of_steps():
    workflow = get("frozen_lake_workflow")({"max_steps": 3})
    engine = ScriptedEngine(lambda conversation: "I am not sure.")
    (exp,) = workflow.run_batch([lake_task(0, seed=1)], engine, repeat_times=1)
    assert engine.calls == [1, 1, 1]
    assert exp.reward == 0.0
    assert exp.metrics == {"success": 0.0, "env_steps": 3.0, "env_done": 0.0}
    messages = exp.info["messages"]
    assert "Your last response is invalid" in messages[3]["content"]
    assert messages[3]["content"].endswith("The maximum number of steps remaining is 2.")


def test_falling_into_a_hole_ends_the_episode_with_reward_0():
    env = FrozenLake(["SH", "FG"], max_steps=5, is_slippery=False, seed=0, system="s")
    env.first_messages()
    result = env.step("```Right```")
    assert (result.observation, result.reward, result.done) == (None, 0.0, True)
    assert env.render() == " _ \t X \t\n _ \t G \t"
    env = FrozenLake(["SH", "FG"], max_steps=5, is_slippery=False, seed=0, system="s")
    assert not env.step("```Down```").done
    result = env.step("```Right```")
    assert (result.reward, result.done, env.metrics()["success"]) == (1.0, True, 1.0)


@pytest.mark.parametrize(
    ("text", "action"),
    [
        ("think ```Up```", 4),
        ("```left``` then ```Right```", 3),
        ("```2```", 2),
        ("```5```", 0),
        ("Up", 0),
        ("``` down ```", 2),
    ],
)
def test_the_last_backtick_block_is_the_action(text, action):
    assert parse_action(text) == action


def test_maps_are_seeded_and_reachable_within_max_steps():
    assert random_map(4, 0.8, 7, 10) == random_map(4, 0.8, 7, 10)
    for seed in range(20):
        board = random_map(3, 0.7, seed, 4)
        assert sum(row.count("S") for row in board) == 1
        assert sum(row.count("G") for row in board) == 1
        assert len(shortest_path(board)) <= 4


def test_a_turn_cut_at_max_tokens_gets_the_templates_end_token_masked():
    tok = build_tokenizer()
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u0"},
        {"role": "assistant", "content": "ab"},
        {"role": "user", "content": "u1"},
    ]
    im_end = tok.convert_tokens_to_ids(IM_END)
    ab = tok("ab", add_special_tokens=False)["input_ids"]
    stopped = Generation([], ab + [im_end], [-0.1] * 3, "ab", "stop")
    cut = Generation([], ab, [-0.1] * 2, "ab", "length")
    # ChatML closes a turn with "<|im_end|>\n": after a sampled <|im_end|> only "\n" is left
    after_stop = tok.decode(continuation_ids(tok, messages, stopped, {}))
    assert after_stop == "\n<|im_start|>user\nu1<|im_end|>\n<|im_start|>assistant\n"
    after_cut = tok.decode(continuation_ids(tok, messages, cut, {}))
    assert after_cut == "<|im_end|>" + after_stop
    # another end token the model sampled stays (trained); the template's closing follows it
    other = Generation(
        [], ab + [tok.convert_tokens_to_ids("<|endoftext|>")], [-0.1] * 3, "ab", "stop"
    )
    assert tok.decode(continuation_ids(tok, messages, other, {})) == "<|im_end|>" + after_stop


def test_an_episode_the_engine_saw_re_rendered_is_trained_as_the_final_conversation():
    # a chat-only engine whose answers do not survive decoding and encoding again (a byte
    # that is not UTF-8): the final conversation is rendered again, its assistant turns trained
    workflow = get("frozen_lake_workflow")({"max_steps": 2})
    engine = ChatOnlyEngine(lambda c: "```Up```")
    bad = engine.tokenizer.convert_tokens_to_ids("\u00ff")  # byte 0xff alone
    original = ScriptedEngine.generate_ids

    def with_bad_byte(self, prompt_ids, params):
        out = original(self, prompt_ids, params)
        for (g,) in out:
            g.response_ids = [bad, *g.response_ids]
            g.logprobs = [-0.1, *g.logprobs]
        return out

    engine.__class__ = type("BadBytes", (ChatOnlyEngine,), {"generate_ids": with_bad_byte})
    (exp,) = workflow.run_batch([lake_task(0, seed=1)], engine, repeat_times=1)
    assert exp.info["retokenized"] is True
    assert exp.logprobs == []
    tok = engine.tokenizer
    trained = tok.decode([t for t, m in zip(exp.response_ids, exp.action_mask, strict=True) if m])
    assert trained == f"```Up```{IM_END}\n```Up```{IM_END}\n"


class ChatOnlyEngine(ScriptedEngine):
    """An engine without generate_ids: every turn goes through chat (the conversation)."""

    def __getattribute__(self, name):
        if name == "generate_ids" and not object.__getattribute__(self, "_inside"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    _inside = False

    def chat(self, conversations, params):
        self._inside = True
        try:
            return super().chat(conversations, params)
        finally:
            self._inside = False


def test_an_engine_without_token_ids_gets_the_conversation_and_the_same_experience():
    workflow = get("frozen_lake_workflow")({"max_steps": 3})
    tokens = workflow.run_batch(
        [lake_task(0, seed=1)], ScriptedEngine(lambda c: "```Up```"), repeat_times=1
    )
    chat = workflow.run_batch(
        [lake_task(0, seed=1)], ChatOnlyEngine(lambda c: "```Up```"), repeat_times=1
    )
    assert not hasattr(ChatOnlyEngine(lambda c: ""), "generate_ids")
    assert chat[0].response_ids == tokens[0].response_ids
    assert chat[0].action_mask == tokens[0].action_mask
    assert chat[0].info["retokenized"] is False
    assert chat[0].logprobs == tokens[0].logprobs
