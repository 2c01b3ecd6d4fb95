"""The demo judge: the tiny demo model taught, on the CPU in ``trinity init-demo``, to be the RULER
judge of the demo's arithmetic task (``math_ruler_workflow`` with
``explorer.auxiliary_models[0].model_path: var/demo/judge``, ``repeat_times: 4`` and
``workflow_args.judge_prompt`` set to :data:`JUDGE_PROMPT`).

Why a trained judge: the untrained demo model, asked to judge, never writes a score list, so a
RULER run with it as judge falls back on every group and learns nothing. A real judge has to
*know* the answer; an instruct model of a few billion parameters does, the 3M-parameter demo model
does not, so it is taught the one skill it needs, in the exact form ``ruler.py`` parses. It
stays a language model that judges from its input: it reads the question and the group's
answers, works the sum out digit by digit, then writes one score per answer. Nothing in the run
looks at the truth to score (``math_reward`` still runs, only as the logged ``gold_reward``).

The judge's conversation is :data:`JUDGE_PROMPT` (a config repeats it as
``workflow_args.judge_prompt``) rendered by
``rft_core.workflows.ruler.ruler_messages``, so the rows it is trained on are the prompts the run
sends it. The template shows each answer's ``{answers}`` field (the text of the response's last
``<answer>…</answer>``; ``-`` when there is none) rather than the whole worked response: the demo
model reads one token per character, and four full responses would quadruple the judge's
training cost. The judge's reply, for ``What is 37 + 48?`` and answers 85, 75, 85, none::

    7+8=15 3+4+1=8 85 1:85/85=1 2:75/85=0 3:85/85=1 4:-/85=0 [1, 0, 1, 0]

— the same digit-wise steps the policy's warmup uses (without them the model does not learn
2-digit addition in minutes), the sum, then each answer copied beside the sum and its call
(``i:answer/sum=0/1``), then the list ``ruler.py`` parses (the reply's last ``[...]``). Copying
the sum again next to each answer puts the two numbers compared side by side: the call compares
adjacent characters, not an answer with a sum 10-30 tokens back.

How the recipe was found (2026-12-05, a sweep on the lent H200, greedy, held-out questions,
policy-like groups; the figure a run logs as ``rollout/judge_agreement/mean``): the first reply
(the sum, then the bare list) reached 0.48 after 300 steps at lr 2e-3; each answer copied beside
its call (``1:85=1``), 0.50-0.56 after 300-1000 steps at lr 3e-3, the calls following the judge's
own sum only 60-70% of the time; the sum copied beside each answer too, 0.64 after 1000 steps at
lr 3e-3. The learning rate was the main fault: at lr 1e-3 the same 1000 steps gave 0.96 (0.94
with another seed) and 0.98 with 50 warm-up steps, against 0.79 after 500 steps and 0.92 after
800; 64 x 500 steps gave 0.90; six layers did worse than four.

Training (:func:`train_judge`): the demo model's random initialisation (seed of the demo), then
:data:`JUDGE_STEPS` AdamW steps of :data:`JUDGE_BATCH` generated groups (loss on the reply only,
learning rate :data:`JUDGE_LR` warmed up over :data:`JUDGE_WARMUP` steps then cosine to zero), on
the CPU with a fixed seed. The groups' candidate answers are drawn to make the judge compare, not
guess: the sum, the sum without the carry, the sum off by one in either digit, a random number,
the digits swapped, or no answer. The data are the same bytes for the same seed; the weights are
deterministic for one CPU kernel path, and fp32 rounding differs a little across kernel paths.
The judge dir holds ``judge.json`` with :data:`JUDGE_RECIPE`; ``init-demo --judge`` retrains a
judge of another recipe.

:func:`measure_judge` is the check: greedy replies to held-out questions with groups drawn like a
warmed-up policy's (:func:`policy_like_answer`: right, the carry left out, off by one, random,
none), the share of replies parsed and of answers called as the truth does (the figure a run
logs as ``rollout/judge_agreement/mean``). ``benchmarks/demo_judge.py`` runs it on each kernel
path; no test does, as training the judge takes tens of CPU-minutes.

Measured (2026-12-05, ``benchmarks/demo_judge.py``, the 2-core development machine, one thread,
greedy, 200 held-out questions x 4 answers): every reply parsed on each kernel path, and the calls
matched the truth on 0.994 / 0.969 / 0.979 of policy-like answers (avx512 / avx2 / default) and
0.969 / 0.951 / 0.971 of training-mix ones. Training cost 881 / 951 / 1210 CPU-seconds
(``trinity init-demo --judge``: about 15-20 minutes on one quiet core). README, "LLM judges".
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rft_core.workflows.ruler import parse_ruler_scores, ruler_messages

if TYPE_CHECKING:  # rft_core.demo imports this module
    from rft_core.demo import Problem

# `{answers}`: one "i: answer" line per response (rft_core.workflows.ruler). Short on purpose.
JUDGE_PROMPT = "{question}\n{answers}\nScores:"
GROUP_SIZE = 4  # the demo config's repeat_times
JUDGE_STEPS = 1000
JUDGE_BATCH = 32
JUDGE_LR = 1e-3
JUDGE_WARMUP = 50
# bump when the reply format or the training changes: `init-demo --judge` retrains an older judge
JUDGE_RECIPE = 3
JUDGE_STAMP = "judge.json"  # in the judge dir: {"recipe": JUDGE_RECIPE}
# the reply: at most 77 characters for the demo's answers (3 digits at most), 121 for four
# answers of final_answer's 12 characters, plus <|im_end|>; the demo config gives the judge 128
JUDGE_MAX_RESPONSE_TOKENS = 128


def judge_is_current(judge_dir: Path) -> bool:
    """Whether ``judge_dir`` holds a judge of this :data:`JUDGE_RECIPE` (its ``judge.json``)."""
    try:
        return json.loads((judge_dir / JUDGE_STAMP).read_text()).get("recipe") == JUDGE_RECIPE
    except (OSError, ValueError, AttributeError):
        return False


def digit_steps(problem: Problem) -> str:
    """The digit-wise sum a judge works out first: ones, then tens with the carry (``7+8=15 3+4+1=8``)."""
    (a1, a0), (b1, b0), c = divmod(problem.a, 10), divmod(problem.b, 10), problem.carry
    return f"{a0}+{b0}={a0 + b0} {a1}+{b1}+{c}={a1 + b1 + c}"


def judge_marks(problem: Problem, answers: list[str]) -> list[str]:
    """Each answer's score as the judge writes it: ``1`` for the sum, else ``0``."""
    return ["1" if a == str(problem.result) else "0" for a in answers]


def judge_reply(problem: Problem, answers: list[str]) -> str:
    """What a correct judge writes: the digit-wise sum, the sum, each answer copied beside the sum
    and its 0/1 (``i:answer/sum=score``: the two numbers compared stand side by side), then the
    list of scores ``ruler.py`` parses (the reply's last ``[...]``)."""
    total, marks = str(problem.result), judge_marks(problem, answers)
    calls = " ".join(
        f"{i + 1}:{a}/{total}={m}" for i, (a, m) in enumerate(zip(answers, marks, strict=True))
    )
    return f"{digit_steps(problem)} {total} {calls} [{', '.join(marks)}]"


def candidate_answer(problem: Problem, rng: random.Random) -> str:
    """One candidate answer for the judge to score (see the module doc for the mix)."""
    s = problem.result
    kind = rng.random()
    if kind < 0.35:
        return str(s)
    if kind < 0.50 and problem.carry:
        return str(s - 10)  # the sloppy teacher's answer: the carry left out
    if kind < 0.65:
        return str(max(0, s + rng.choice([-1, 1, -10, 10, -11, 11])))
    if kind < 0.80:
        return str(rng.randint(20, 198))
    if kind < 0.92:
        swapped = str(s)[::-1].lstrip("0") or "0"
        return swapped if swapped != str(s) else str(s + 1)
    return "-"


def policy_like_answer(problem: Problem, rng: random.Random) -> str:
    """An answer drawn like a warmed-up demo policy's group (the held-out check's mix, not the
    training mix): right 45%, the carry left out 25% (tens off by 10 where there is no carry),
    off by one 12%, a random number 10%, no answer 8%."""
    s = problem.result
    kind = rng.random()
    if kind < 0.45:
        return str(s)
    if kind < 0.70:
        return str(s - 10) if problem.carry else str(s + rng.choice([-10, 10]))
    if kind < 0.82:
        return str(s + rng.choice([-1, 1]))
    if kind < 0.92:
        return str(rng.randint(20, 198))
    return "-"


def judge_rows(
    problems: list[Problem],
    count: int,
    seed: int,
    *,
    reply_of: Callable[[Problem, list[str]], str] = judge_reply,
    draw: Callable[[Problem, random.Random], str] = candidate_answer,
) -> list[dict]:
    """``count`` judge training rows: messages (the judge's conversation, then its reply).
    ``reply_of`` / ``draw``: another reply format or answer mix (``benchmarks/demo_judge_sweep.py``)."""
    rng = random.Random(f"judge-{seed}")
    rows = []
    for _ in range(count):
        problem = rng.choice(problems)
        answers = [draw(problem, rng) for _ in range(GROUP_SIZE)]
        responses = [f"<answer>{a}</answer>" if a != "-" else "" for a in answers]
        messages = ruler_messages(problem.question, responses, prompt=JUDGE_PROMPT)
        reply = reply_of(problem, answers)
        rows.append({"messages": [*messages, {"role": "assistant", "content": reply}]})
    return rows


def train_judge(
    directory: Path,
    problems: list[Problem],
    seed: int,
    *,
    build_tokenizer: Callable[[], Any],
    build_model: Callable[[Any, int], Any],
    save_model: Callable[[Path, Any, Any], None],
) -> None:
    """Train the demo judge (module doc) and save it as a Hugging Face model in ``directory``.
    The demo model's builders come from ``rft_core.demo``, its caller (this module never
    imports it: no import cycle)."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed)
    rows = judge_rows(problems, JUDGE_STEPS * JUDGE_BATCH, seed)
    fit_judge(model, tokenizer, [row["messages"] for row in rows], seed=seed)
    model.eval()
    save_model(directory, model, tokenizer)


def fit_judge(
    model: Any,
    tokenizer: Any,
    conversations: list[list[dict]],
    *,
    seed: int,
    steps: int = JUDGE_STEPS,
    batch_size: int = JUDGE_BATCH,
    lr: float = JUDGE_LR,
    warmup: int = JUDGE_WARMUP,
) -> float:
    """AdamW on ``conversations`` (each ends with the judge's reply; the loss is on the reply
    only), ``batch_size`` of them a step in order, the learning rate warmed up over ``warmup``
    steps then cosine to zero, on ``model``'s device. Returns the last step's loss. The recipe's
    defaults are :func:`train_judge`'s; ``benchmarks/demo_judge_sweep.py`` tries others."""
    pad = tokenizer.pad_token_id
    device = model.device
    examples = [_encode(tokenizer, messages) for messages in conversations]
    loss = torch.zeros(())
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        model.train()
        for step in range(steps):
            rate = lr * min((step + 1) / warmup, 0.5 * (1 + math.cos(math.pi * step / steps)))
            for group in optimizer.param_groups:
                group["lr"] = rate
            batch = examples[step * batch_size : (step + 1) * batch_size]
            width = max(len(ids) for ids, _ in batch)
            input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            attention = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (ids, start) in enumerate(batch):
                input_ids[i, : len(ids)] = torch.tensor(ids)
                labels[i, start : len(ids)] = torch.tensor(ids[start:])
                attention[i, : len(ids)] = 1
            loss = model(
                input_ids=input_ids.to(device),
                attention_mask=attention.to(device),
                labels=labels.to(device),
            ).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    model.eval()
    return float(loss.item())


def _encode(tokenizer, messages: list[dict]) -> tuple[list[int], int]:
    """Token ids of the whole conversation and where the judge's reply starts."""
    prompt = tokenizer.apply_chat_template(
        messages[:-1], tokenize=False, add_generation_prompt=True
    )
    start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    full = prompt + messages[-1]["content"] + "<|im_end|>"
    return tokenizer(full, add_special_tokens=False)["input_ids"], start


def measure_judge(
    model: Any,
    tokenizer: Any,
    problems: list[Problem],
    *,
    groups: int = 200,
    seed: int = 7,
    draw: Callable[[Problem, random.Random], str] = policy_like_answer,
) -> dict[str, float]:
    """Greedy replies of the judge to ``groups`` groups of :data:`GROUP_SIZE` answers (``draw``:
    :func:`policy_like_answer` unless given) on questions drawn from ``problems`` (held-out ones
    for a fair check): ``parsed`` (share of replies ``parse_ruler_scores`` reads),
    ``agreement`` (share of answers, over all groups, whose call - score >= 0.5 - matches the
    truth; a reply that does not parse counts as wrong on all its answers) and ``sum_right``
    (share of replies whose sum, the third word, is the truth)."""

    rng = random.Random(f"judge-check-{seed}")
    drawn = []
    for problem in rng.sample(problems, groups):
        drawn.append((problem, [draw(problem, rng) for _ in range(GROUP_SIZE)]))
    texts = [
        tokenizer.apply_chat_template(
            ruler_messages(
                p.question,
                [f"<answer>{a}</answer>" if a != "-" else "" for a in answers],
                prompt=JUDGE_PROMPT,
            ),
            tokenize=False,
            add_generation_prompt=True,
        )
        for p, answers in drawn
    ]
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    finally:
        tokenizer.padding_side = side
    model.eval()
    with torch.no_grad():
        batch = batch.to(model.device)
        out = model.generate(**batch, max_new_tokens=JUDGE_MAX_RESPONSE_TOKENS, do_sample=False)
    parsed = agreed = sums = 0
    for (problem, answers), row in zip(drawn, out, strict=True):
        reply = tokenizer.decode(row[batch["input_ids"].shape[1] :], skip_special_tokens=True)
        sums += reply.split(" ")[2:3] == [str(problem.result)]  # the reply's own sum
        scores = parse_ruler_scores(reply, GROUP_SIZE)
        if scores is None:
            continue
        parsed += 1
        right = str(problem.result)
        agreed += sum((x >= 0.5) == (a == right) for a, x in zip(answers, scores, strict=True))
    return {
        "parsed": parsed / groups,
        "agreement": agreed / (groups * GROUP_SIZE),
        "sum_right": sums / groups,
    }
