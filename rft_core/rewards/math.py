"""Math rewards for GSM8K-style tasks: ``math_reward`` (accuracy + format), ``accuracy_reward``,
``format_reward``.

Truth: the text after the last ``####`` (GSM8K), else the last ``\\boxed{}``, else the whole
string. Answer: the last ``<answer>…</answer>`` block when present, else the whole response; in
it the last ``\\boxed{}`` if any, else the text itself if it is a number or simple expression,
else its last number. Values compare numerically: ``1,200`` = ``1200``, ``72.0`` = ``72``,
``3/4`` = ``0.75`` = ``\\frac{3}{4}``.

Expressions are read by a small recursive-descent parser over exact fractions (numbers,
``+ - * / ^``, parentheses, ``\\frac``) rather than by sympy or ``eval``: it never executes
text from a model, needs no extra dependency, and GSM8K-style answers need nothing more.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rft_core.rewards.base import register

FORMAT_SCORE = 0.1

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_FORMAT_RE = re.compile(r"^\s*<think>.*?</think>\s*<answer>.*?</answer>\s*$", re.DOTALL)
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?:/\d+(?:\.\d+)?)?")
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_TOKEN_RE = re.compile(r"\s*(\\frac|\d+\.?\d*|\.\d+|[-+*/^(){}])")
_LATEX_NOISE = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\ ", ""),
    ("\\$", ""),
    ("$", ""),
    ("\\%", ""),
    ("%", ""),
    ("^\\circ", ""),
    ("^{\\circ}", ""),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("\\cdot", "*"),
    ("\\times", "*"),
    ("\\div", "/"),
)


# -- reading numbers --------------------------------------------------------------------------


class _Parser:
    """expr := term (('+'|'-') term)*;  term := unary (('*'|'/') unary)*;
    unary := ('+'|'-') unary | power;  power := atom ('^' unary)?;
    atom := number | '(' expr ')' | '{' expr '}' | '\\frac' '{' expr '}' '{' expr '}'"""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise ValueError(f"expected {expected!r}, got {tok!r}")
        self.pos += 1
        return tok

    def expr(self) -> Fraction:
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take() == "+" else value - self.term()
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while self.peek() in ("*", "/"):
            if self.take() == "*":
                value *= self.unary()
            else:
                value /= self.unary()  # ZeroDivisionError -> not a number
        return value

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            sign = self.take()
            value = self.unary()
            return -value if sign == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() == "^":
            self.take()
            exponent = self.unary()
            if exponent.denominator != 1 or abs(exponent) > 64:
                raise ValueError("only small integer exponents")
            return base ** int(exponent)
        return base

    def atom(self) -> Fraction:
        tok = self.take()
        if tok == "(":
            value = self.expr()
            self.take(")")
            return value
        if tok == "{":
            value = self.expr()
            self.take("}")
            return value
        if tok == "\\frac":
            self.take("{")
            num = self.expr()
            self.take("}")
            self.take("{")
            den = self.expr()
            self.take("}")
            return num / den
        if tok[0].isdigit() or tok[0] == ".":
            return Fraction(tok)
        raise ValueError(f"unexpected {tok!r}")


def _clean(text: str) -> str:
    text = re.sub(r"\\text\{[^{}]*\}", "", text)
    for old, new in _LATEX_NOISE:
        text = text.replace(old, new)
    text = _THOUSANDS_RE.sub("", text)
    return text.strip().rstrip(".").strip()


def parse_number(text: str) -> Fraction | None:
    """The exact value of ``text`` if all of it is a number or a simple expression, else None."""
    text = _clean(text)
    if not text or len(text) > 200:
        return None
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None:
            if text[pos:].strip() == "":
                break
            return None
        tokens.append(match.group(1))
        pos = match.end()
    parser = _Parser(tokens)
    try:
        value = parser.expr()
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return value if parser.peek() is None else None


def last_number(text: str) -> Fraction | None:
    """The last number written in ``text`` (``1,200``, ``-3.5`` and ``3/4`` count)."""
    for match in reversed(_NUMBER_RE.findall(text)):
        value = parse_number(match)
        if value is not None:
            return value
    return None


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (balanced braces) or ``\\boxed x``."""
    start = text.rfind("\\boxed")
    if start < 0:
        return None
    rest = text[start + len("\\boxed") :]
    if not rest.lstrip().startswith("{"):
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    rest = rest.lstrip()
    depth = 0
    for i, ch in enumerate(rest):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return rest[1:i]
    return None


# -- truth and answer ---------------------------------------------------------------------------


def extract_truth(truth: str) -> str:
    """GSM8K ``… #### 72`` -> ``72``; ``\\boxed{72}`` -> ``72``; otherwise the stripped text."""
    if "####" in truth:
        return truth.rsplit("####", 1)[1].strip()
    boxed = last_boxed(truth)
    return boxed.strip() if boxed is not None else truth.strip()


def extract_answer(response: str) -> str:
    """The text that holds the model's answer (see the module doc); "" when there is none."""
    blocks = _ANSWER_RE.findall(response)
    text = blocks[-1] if blocks else response
    boxed = last_boxed(text)
    return (boxed if boxed is not None else text).strip()


def _value(text: str) -> Fraction | None:
    value = parse_number(text)
    return value if value is not None else last_number(text)


def _normalise(text: str) -> str:
    return re.sub(r"\s+", "", _clean(text)).lower()


def is_correct(response: str, truth: str) -> bool:
    """True when the answer in ``response`` equals ``truth`` as a number (or, when the truth is
    not a number, as normalised text)."""
    truth_text = extract_truth(truth)
    answer_text = extract_answer(response)
    if not answer_text or not truth_text:
        return False
    expected = _value(truth_text)
    if expected is None:
        return _normalise(answer_text) == _normalise(truth_text)
    got = _value(answer_text)
    if got is None:
        return False
    if got == expected:
        return True
    # a whole-number truth needs the exact number (1234568 is not 1234567); a fraction may
    # be answered as a rounded decimal (1/3 as 0.333333)
    return expected.denominator != 1 and math.isclose(float(got), float(expected), rel_tol=1e-6)


def has_think_answer_format(response: str) -> bool:
    """The whole response is one ``<think>…</think>`` then one ``<answer>…</answer>``."""
    if _FORMAT_RE.match(response) is None:
        return False
    return all(response.count(tag) == 1 for tag in ("<think>", "</think>", "<answer>", "</answer>"))


# -- the registered reward functions ------------------------------------------------------------


@register("accuracy_reward")
def accuracy_reward(response: str, truth: str) -> dict[str, float]:
    """``accuracy``: 1.0 when the answer matches the truth, else 0.0."""
    return {"accuracy": 1.0 if is_correct(response, truth) else 0.0}


@register("format_reward")
def format_reward(
    response: str, truth: str = "", *, format_score_coef: float = FORMAT_SCORE
) -> dict[str, float]:
    """``format_score``: +coef for ``<think>…</think><answer>…</answer>``, else -coef."""
    ok = has_think_answer_format(response)
    return {"format_score": format_score_coef if ok else -format_score_coef}


@register("math_reward")
def math_reward(
    response: str, truth: str, *, format_score_coef: float = FORMAT_SCORE
) -> dict[str, float]:
    """``accuracy`` (1/0) + ``format_score`` (±0.1): the reward of ``math_workflow``."""
    return {
        **accuracy_reward(response, truth),
        **format_reward(response, truth, format_score_coef=format_score_coef),
    }


def has_one_think_block(response: str) -> bool:
    """Exactly one ``<think>`` and one ``</think>``, in that order (Trinity's think check)."""
    if response.count("<think>") != 1 or response.count("</think>") != 1:
        return False
    return response.find("<think>") < response.find("</think>")


@register("math_boxed_reward")
def math_boxed_reward(
    response: str,
    truth: str,
    *,
    with_think: bool = False,
    format_score_coef: float = FORMAT_SCORE,
) -> dict[str, float]:
    """Trinity-RFT's ``math_boxed_reward``: ``accuracy`` 1/0 for the last ``\\boxed{}`` of the
    response against the truth (no box: 0); ``format_score`` -coef when ``with_think`` and the
    response lacks one ``<think>…</think>`` block, else 0."""
    boxed = last_boxed(response)
    correct = boxed is not None and is_correct("\\boxed{" + boxed + "}", truth)
    penalty = with_think and not has_one_think_block(response)
    return {
        "accuracy": 1.0 if correct else 0.0,
        "format_score": -format_score_coef if penalty else 0.0,
    }
