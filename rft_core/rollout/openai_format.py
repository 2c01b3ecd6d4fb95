"""The OpenAI chat-completions wire format on top of a rollout engine's tokenizer: request
messages (with ``tools`` and ``tool_calls``) to the prompt the chat template renders, and sampled
text back to an assistant message with ``tool_calls``. Pure functions; the server
(``rft_core.rollout.openai_server``) uses them.

Tools follow the Hermes convention that Qwen's templates and vLLM's ``hermes`` tool-call parser
share: the model is shown the tool signatures as JSON inside ``<tools></tools>`` and calls one by
writing ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

- A chat template that knows tools (it mentions ``tool_calls``, as Qwen2.5/Qwen3's do) gets the
  request as it is: ``tools=`` and the messages, with each assistant ``tool_calls[].function
  .arguments`` parsed from its JSON string into an object (what those templates expect; vLLM
  does the same).
- A template that does not (the demo model's) gets the same information folded into plain
  messages: the tool signatures appended to the system message, an assistant turn's tool calls
  written after its content as ``<tool_call>`` blocks, and consecutive ``tool`` messages merged
  into one ``user`` message of ``<tool_response>`` blocks, as Qwen's template lays them out.

Either way the model sees its tools and its earlier calls as text, and its reply is parsed back:
every well-formed ``<tool_call>`` block becomes a ``tool_calls`` entry and is cut from
``content``; a block that is not JSON with a ``name`` stays in ``content`` untouched.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

TOOL_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)

TOOLS_PREAMBLE = (
    "# Tools\nFunction signatures:\n<tools>\n{tools}\n</tools>\nTo call one, write "
    '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)


class RequestError(ValueError):
    """A request the endpoint cannot serve; the server answers 400 with this message."""


def text_of(content: Any) -> str:
    """A message's content as text: a string, None (""), or a list of parts whose ``text``
    parts are joined (images and other parts are refused: the engines are text-only)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            else:
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise RequestError(f"content part of type {kind!r}: only text parts are served")
        return "".join(texts)
    raise RequestError(f"message content must be a string or a list of parts, got {content!r}")


def template_knows_tools(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template renders ``tools`` and ``tool_calls`` itself."""
    template = getattr(tokenizer, "chat_template", None) or ""
    return isinstance(template, str) and "tool_calls" in template


def _arguments_object(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            return arguments
    return arguments


def _call_text(call: dict[str, Any]) -> str:
    fn = call.get("function") or {}
    body = {"name": fn.get("name"), "arguments": _arguments_object(fn.get("arguments"))}
    return f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>"


def _check_messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty list")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(f"messages[{i}] must be an object with a 'role'")
    return messages


def template_messages(
    messages: Any, tools: list[dict[str, Any]] | None, tokenizer: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """``(messages, tools)`` to hand to ``apply_chat_template`` (see the module doc)."""
    messages = _check_messages(messages)
    if template_knows_tools(tokenizer):
        out = []
        for m in messages:
            m = dict(m, content=text_of(m.get("content")))
            if m.get("tool_calls"):
                m["tool_calls"] = [
                    dict(
                        c,
                        function=dict(
                            c.get("function") or {},
                            arguments=_arguments_object((c.get("function") or {}).get("arguments")),
                        ),
                    )
                    for c in m["tool_calls"]
                ]
            out.append(m)
        return out, tools or None
    return fold_tools(messages, tools), None


def fold_tools(
    messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> list[dict[str, str]]:
    """Messages with tools, tool calls and tool results written as plain text (Hermes layout)
    for templates that render only ``role`` and ``content``."""
    out: list[dict[str, str]] = []
    for m in messages:
        role, content = m["role"], text_of(m.get("content"))
        if role == "assistant" and m.get("tool_calls"):
            calls = "\n".join(_call_text(c) for c in m["tool_calls"])
            content = f"{content}\n{calls}" if content else calls
        if role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool": "1"})
            continue
        out.append({"role": role, "content": content})
    if tools:
        listing = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
        preamble = TOOLS_PREAMBLE.format(tools=listing)
        if out and out[0]["role"] == "system":
            out[0]["content"] = f"{out[0]['content']}\n\n{preamble}"
        else:
            out.insert(0, {"role": "system", "content": preamble})
    return [{"role": m["role"], "content": m["content"]} for m in out]


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """``(content, tool_calls)`` of a sampled reply: each well-formed ``<tool_call>`` block
    becomes an OpenAI tool call (``arguments`` as a JSON string) and leaves ``content``; None
    content when nothing else is left."""
    calls: list[dict[str, Any]] = []
    kept: list[str] = []
    last = 0
    for match in TOOL_CALL_RE.finditer(text):
        try:
            body = json.loads(match.group(1))
        except json.JSONDecodeError:
            continue
        if not isinstance(body, dict) or not isinstance(body.get("name"), str):
            continue
        arguments = body.get("arguments", {})
        calls.append(
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {
                    "name": body["name"],
                    "arguments": arguments
                    if isinstance(arguments, str)
                    else json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
        kept.append(text[last : match.start()])
        last = match.end()
    if not calls:
        return text, []
    kept.append(text[last:])
    content = "".join(kept).strip()
    return content or None, calls


def cut_at_stop(
    tokenizer: Any, response_ids: list[int], stops: list[str]
) -> tuple[int, str] | None:
    """Where the first stop string appears in the decoded response: ``(tokens to keep, text
    before the stop)``, the tokens up to and including the one that completes it (what the model
    sampled); None when no stop string appears."""
    if not stops:
        return None
    full = tokenizer.decode(response_ids, skip_special_tokens=True)
    hits = [(full.find(s), s) for s in stops if s and s in full]
    if not hits:
        return None
    at, stop = min(hits)
    for k in range(1, len(response_ids) + 1):
        if len(tokenizer.decode(response_ids[:k], skip_special_tokens=True)) >= at + len(stop):
            return k, full[:at]
    return len(response_ids), full[:at]
