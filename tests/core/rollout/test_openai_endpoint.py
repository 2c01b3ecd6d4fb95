"""The OpenAI-compatible endpoint on the rollout engine (``rft_core.rollout.openai_server``),
driven by the real ``openai`` client against the hf engine on a tiny random Qwen2 model (CPU):
completions with the engine's token ids and log-probs recorded per call (checked against a
teacher-forced recompute with the model), the per-run key (401 otherwise), loopback only, tools
and tool calls as text the chat template renders, stop strings; and the message/tool-call
format by hand."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import openai
import pytest
import torch
from tiny_lm import build_tiny_model, build_tokenizer

from rft_core.modeling import token_logprobs
from rft_core.rollout import build_engine
from rft_core.rollout.openai_format import (
    cut_at_stop,
    fold_tools,
    parse_tool_calls,
    template_messages,
)
from rft_core.rollout.openai_server import endpoint_for, stop_endpoint
from rft_core.workflows.react_math import CALCULATE_TOOL

QUESTION = [{"role": "user", "content": "1+2=?"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    return build_engine(
        "hf",
        str(build_tiny_model(tmp_path_factory.mktemp("tiny"), max_position_embeddings=2048)),
        seed=3,
    )


@pytest.fixture(scope="module")
def endpoint(engine):
    engine.served_model_name = "tiny-policy"
    endpoint = endpoint_for(engine)
    yield endpoint
    stop_endpoint(engine)
    assert not endpoint.running


def teacher_forced(engine, prompt_ids, response_ids, temperature):
    ids = torch.tensor([prompt_ids + response_ids])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0]
    start = len(prompt_ids) - 1
    return logits[start : start + len(response_ids)], token_logprobs(
        logits[start : start + len(response_ids)], torch.tensor(response_ids), temperature
    )


def test_chat_completion_records_the_engines_tokens_and_logprobs(engine, endpoint):
    client = endpoint.client("episode-a")
    assert [m.id for m in client.models.list().data] == ["tiny-policy"]
    reply = client.chat.completions.create(
        model="tiny-policy",
        messages=QUESTION,
        n=2,
        temperature=0.7,
        max_tokens=8,
        logprobs=True,
        seed=11,
    )
    assert len(reply.choices) == 2
    # the prompt is the conversation as the engine's chat template renders it
    prompt_ids = engine.encode_chat(QUESTION)
    assert reply.model_extra["prompt_token_ids"] == prompt_ids
    assert reply.usage.prompt_tokens == len(prompt_ids)
    turns = endpoint.take_turns("episode-a")
    assert len(turns) == 2 and endpoint.take_turns("episode-a") == []  # taken once
    for choice, turn in zip(reply.choices, turns, strict=True):
        assert turn.prompt_ids == prompt_ids
        assert choice.model_extra["token_ids"] == turn.response_ids
        assert 0 < len(turn.response_ids) <= 8
        assert [t.logprob for t in choice.logprobs.content] == turn.logprobs
        assert turn.model_version == engine.model_version == 0
        assert choice.message.content == turn.text
        # recompute: log softmax(logits / T) at the sampled token, by hand for the first token
        logits, expected = teacher_forced(engine, turn.prompt_ids, turn.response_ids, 0.7)
        first = turn.response_ids[0]
        by_hand = logits[0][first] / 0.7 - torch.logsumexp(logits[0] / 0.7, dim=-1)
        assert turn.logprobs[0] == pytest.approx(by_hand.item(), abs=1e-4)
        torch.testing.assert_close(torch.tensor(turn.logprobs), expected, atol=1e-4, rtol=0)
    # sessions keep apart: nothing of episode-a was filed under the default session
    assert endpoint.take_turns() == []


def test_the_key_is_checked_and_the_endpoint_is_loopback_only(endpoint):
    assert endpoint.base_url().startswith("http://127.0.0.1:")
    bound = {s.getsockname()[0] for server in endpoint._server.servers for s in server.sockets}
    assert bound == {"127.0.0.1"}
    assert len(endpoint.api_key) >= 40  # 32 random bytes, url-safe base64
    for key in ("EMPTY", endpoint.api_key[:-1] + "x"):
        bad = openai.OpenAI(base_url=endpoint.base_url(), api_key=key, max_retries=0)
        with pytest.raises(openai.AuthenticationError) as err:
            bad.chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
        assert err.value.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            bad.models.list()
    # no Authorization header at all
    request = urllib.request.Request(endpoint.base_url() + "/models")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 401
    assert json.loads(err.value.read())["error"]["code"] == "invalid_api_key"
    assert endpoint.take_turns() == []  # refused calls record nothing


def test_bad_requests_are_400_and_streaming_is_refused(endpoint):
    client = endpoint.client()
    with pytest.raises(openai.BadRequestError, match="stream"):
        client.chat.completions.create(model="m", messages=QUESTION, stream=True)
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="m", messages=[])
    long = [{"role": "user", "content": "x" * 2100}]  # one token per byte: past 2048 positions
    with pytest.raises(openai.BadRequestError, match="does not fit model.max_model_len=2048"):
        client.chat.completions.create(model="m", messages=long)


def test_tools_and_tool_calls_reach_the_model_as_text(engine, endpoint):
    # the demo template renders role + content only: the tools and the earlier call and its
    # result are folded into the messages (Hermes layout) and the model sees them as text
    client = endpoint.client("tools")
    messages = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "2+3?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculate", "arguments": '{"expression": "2+3"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    client.chat.completions.create(
        model="m", messages=messages, tools=[CALCULATE_TOOL], max_tokens=4, temperature=0.0
    )
    (turn,) = endpoint.take_turns("tools")
    prompt = engine.tokenizer.decode(turn.prompt_ids)
    assert (
        'Function signatures:\n<tools>\n{"type": "function", "function": {"name": "calculate"'
        in prompt
    )
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "calculate", "arguments": '
        '{"expression": "2+3"}}\n</tool_call><|im_end|>' in prompt
    )
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert turn.messages == messages  # the request as the agent sent it


def test_a_sampled_tool_call_block_becomes_a_tool_call():
    text = (
        'I will compute.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "2*3"}}'
        "\n</tool_call>\n<tool_call>not json</tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert content == "I will compute.\n\n<tool_call>not json</tool_call>"
    assert len(calls) == 1 and calls[0]["type"] == "function"
    assert calls[0]["function"] == {"name": "calculate", "arguments": '{"expression": "2*3"}'}
    assert parse_tool_calls("just text") == ("just text", [])
    assert parse_tool_calls('<tool_call>{"name": "f"}</tool_call>')[0] is None


def test_templates_that_know_tools_get_the_request_as_it_is():
    class QwenLike:  # a template that renders tools and tool_calls itself
        chat_template = "{% for m in messages %}{{ m.tool_calls }}{% endfor %}"

    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    msgs = [{"role": "assistant", "content": None, "tool_calls": [call]}]
    out, tools = template_messages(msgs, [CALCULATE_TOOL], QwenLike())
    assert tools == [CALCULATE_TOOL]
    assert out[0]["content"] == "" and out[0]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    # consecutive tool results are one user turn in the folded layout
    folded = fold_tools(
        [{"role": "tool", "content": "1"}, {"role": "tool", "content": "2"}], tools=None
    )
    assert folded == [
        {
            "role": "user",
            "content": "<tool_response>\n1\n</tool_response>\n<tool_response>\n2\n</tool_response>",
        }
    ]


def test_stop_strings_cut_after_the_token_that_completes_them():
    tokenizer = build_tokenizer()  # byte-level: one token per character here
    ids = tokenizer("abc STOP def", add_special_tokens=False)["input_ids"]
    assert len(ids) == 12
    # "abc STOP" is 8 characters: the 8th token completes the stop; the text ends before it
    assert cut_at_stop(tokenizer, ids, ["STOP", "zzz"]) == (8, "abc ")
    assert cut_at_stop(tokenizer, ids, ["zzz"]) is None
    assert cut_at_stop(tokenizer, ids, ["def", " S"]) == (5, "abc")  # the earliest stop wins


def test_each_call_records_the_model_version_it_was_sampled_with(engine, endpoint):
    client = endpoint.client("versions")
    try:
        for version in (0, 7):  # the explorer sets it when it loads the trainer's weights
            engine.model_version = version
            reply = client.chat.completions.create(model="m", messages=QUESTION, max_tokens=2)
            assert reply.model_extra["model_version"] == version
    finally:
        engine.model_version = 0
    assert [t.model_version for t in endpoint.take_turns("versions")] == [0, 7]
