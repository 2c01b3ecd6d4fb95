"""The ReAct math agent of Trinity-RFT's AgentScope examples, as a plain ``openai`` tool-calling
loop on the run's OpenAI endpoint (``rft_core.workflows.agent``), registered under the names
Trinity's example configs use: ``as_react_workflow`` / ``agentscope_react_workflow``
(``examples/agentscope_react``), ``agentscope_react_math_workflow``,
``agentscopev0_react_math_workflow``, ``agentscope_reactv2_math_workflow``
(``examples/agentscope_tool_react``) and ``agentscope_reactv2_gsm8k_workflow``
(``examples/agentscope_gsm8k``).

The agent gets Trinity's system prompt (a math agent with a tool, final answer in
``\\boxed{}``) and the question; each turn it calls the model with one tool, ``calculate``
(an arithmetic expression: numbers, + - * / // % **, parentheses; evaluated in-process on the
expression's syntax tree, never ``eval``); a reply with tool calls gets each tool's result as a
``tool`` message and another turn, a reply without is the final answer. At most ``max_turns``
model calls (``workflow_args.max_turns``, default 5: Trinity's ``max_iters``). Reward: Trinity's
``MathBoxedRewardFn`` on the final answer (``math_boxed_reward``: ``accuracy`` 1 when the last
``\\boxed{}`` equals the truth, GSM8K's ``#### N`` read; ``format_score``), the same on every call
of the episode.

Where Trinity differs: its agents execute Python code (AgentScope's ``execute_python_code``) where
this one has the calculator (a model's code is not run inside the explorer process); the
AgentScope agent's structured ``generate_response`` tool is a plain final reply here. A plug-in
workflow can run any other agent (AgentScope's included) against ``endpoint.client(session)``.
``as_react_workflow``'s ``workflow_args.type`` must be ``gsm8k``: its ``email_search`` template
needs the e-mail corpus service (refused with that reason).
"""

from __future__ import annotations

import ast
import json
import math
import operator
from typing import Any

from rft_core import rewards
from rft_core.data.task import Task
from rft_core.errors import ConfigError
from rft_core.workflows.agent import AgentWorkflow, EpisodeResult
from rft_core.workflows.base import Workflow, register

SYSTEM_PROMPT = (
    "You are an agent specialized in solving math problems with tools. Please solve the math "
    "problem given to you. You can call the calculate tool to perform calculations or verify "
    "your answer. You should return your final answer within \\boxed{}."
)

CALCULATE_TOOL = {
    "type": "function",
    "function": {
        "name": "calculate",
        "description": "Evaluate arithmetic: + - * / // % ** ( )",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
        },
    },
}

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 100


def calculate(expression: str) -> str:
    """The value of an arithmetic expression as text, or ``Error: ...`` (never raises)."""

    def value(node: ast.AST) -> float | int:
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
                raise ValueError(f"exponent {right} is larger than {MAX_EXPONENT}")
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported syntax: {ast.dump(node)[:60]}")

    text = str(expression).strip()
    if len(text) > MAX_EXPRESSION_CHARS:
        return f"Error: the expression is longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        result = value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError, ArithmeticError, TypeError) as err:
        return f"Error: {err}"
    if isinstance(result, float) and math.isfinite(result) and result.is_integer():
        result = int(result)
    return str(result)


def run_tool(name: str, arguments: str) -> str:
    """The result of one tool call as the ``tool`` message's content."""
    if name != "calculate":
        return f"Error: unknown tool {name!r}; the tool is calculate"
    try:
        args = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError as err:
        return f"Error: the arguments are not JSON ({err})"
    if not isinstance(args, dict) or "expression" not in args:
        return 'Error: calculate takes {"expression": "..."}'
    return calculate(str(args["expression"]))


@register("as_react_workflow")
@register("agentscope_react_workflow")
@register("agentscope_react_math_workflow")
@register("agentscopev0_react_math_workflow")
@register("agentscope_reactv2_math_workflow")
@register("agentscope_reactv2_gsm8k_workflow")
class ReActMathWorkflow(AgentWorkflow):
    """See the module doc."""

    default_reward_fn = (
        "math_boxed_reward"  # Trinity's MathBoxedRewardFn; a taskset may name another
    )
    takes_args = ("max_turns", "system_prompt", "type")

    def __init__(self, args: dict[str, Any] | None = None, **models: Any) -> None:
        super().__init__(args, **models)
        self.max_turns = int(self.args.get("max_turns", 5))
        self.system_prompt = str(self.args.get("system_prompt", SYSTEM_PROMPT))
        kind = self.args.get("type", "gsm8k")
        if kind != "gsm8k":
            raise ConfigError(
                "buffer.explorer_input.taskset.workflow_args.type",
                f"{kind!r}: the ReAct agent's {kind} template needs a service outside the job "
                "(email_search: the e-mail corpus database and its search tools); only gsm8k "
                "(math with a calculator) runs here; register that agent from a plugin "
                "directory (trinity run --plugin-dir DIR)",
                value=kind,
            )
        if self.max_turns < 1:
            raise ConfigError("workflow_args.max_turns", "must be >= 1", value=self.max_turns)

    def check(self, task: Task) -> str:
        return Workflow.check(self, task)  # the reward function and its reward_fn_args

    def run_episode(
        self, task: Task, client: Any, model: str, sampling: dict[str, Any]
    ) -> EpisodeResult:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": self.system_prompt},
            {"role": "user", "content": task.prompt},
        ]
        answer, tool_calls, finished = "", 0, False
        for _ in range(self.max_turns):
            reply = client.chat.completions.create(
                model=model, messages=messages, tools=[CALCULATE_TOOL], **sampling
            )
            message = reply.choices[0].message
            answer = message.content or ""
            calls = list(message.tool_calls or [])
            turn: dict[str, Any] = {"role": "assistant", "content": answer}
            if calls:
                turn["tool_calls"] = [c.model_dump() for c in calls]
            messages.append(turn)
            if not calls:
                finished = True
                break
            for call in calls:
                tool_calls += 1
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.id,
                        "content": run_tool(call.function.name, call.function.arguments),
                    }
                )
        parts = rewards.score(self.reward_fn_name(task), answer, task.truth, task.reward_fn_args)
        return EpisodeResult(
            parts,
            answer,
            {"tool_calls": float(tool_calls), "finished": float(finished)},
        )
