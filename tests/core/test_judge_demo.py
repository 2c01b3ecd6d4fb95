"""The demo judge (``rft_core.demo_judge``, ``trinity init-demo --judge``): a correct judge's
reply is the digit-wise sum, each answer copied beside its 0/1, and the list ``ruler.py`` parses;
the prompt shows each answer's final ``<answer>`` only; the rows are the same bytes for the same
seed; the judge config without a built judge (or with one of an older recipe) stops before
``trinity run`` with one line that says how to build it; and ``measure_judge`` (what
``benchmarks/demo_judge.py`` reports) computes agreement, parsed replies and right sums as its
doc says, on scripted judges whose figures are worked out by hand.

What no test asserts: the trained judge's agreement itself (README, "LLM judges": 0.969-0.994 on
policy-like groups) and the RULER run's held-out accuracy (0.583 -> 0.793). Training the judge
takes 15-20 CPU-minutes and the RULER run 23 minutes; ``benchmarks/demo_judge.py`` measures the
first per kernel path, and the second is a run of ``judge_ruler_trained_judge.yaml``."""

import re
import shutil

import torch

from rft_core.demo import Problem, build_demo, build_tokenizer
from rft_core.demo_judge import GROUP_SIZE, JUDGE_PROMPT, judge_reply, judge_rows, measure_judge
from rft_core.workflows.ruler import final_answer, parse_ruler_scores, ruler_messages


def test_a_correct_judge_scores_the_computed_sum_by_hand():
    # 37 + 48: ones 7+8=15 carry 1, tens 3+4+1=8 -> 85; 75 drops the carry, "-" is no answer
    reply = judge_reply(Problem(37, 48), ["85", "75", "85", "-"])
    assert reply == "7+8=15 3+4+1=8 85 1:85/85=1 2:75/85=0 3:85/85=1 4:-/85=0 [1, 0, 1, 0]"
    assert parse_ruler_scores(reply, 4) == [1.0, 0.0, 1.0, 0.0]
    assert (
        judge_reply(Problem(20, 31), ["51", "15"]) == "0+1=1 2+3+0=5 51 1:51/51=1 2:15/51=0 [1, 0]"
    )


def test_the_judge_reads_only_each_answers_final_answer():
    assert final_answer("<think>7+8=15 3+4+1=8</think><answer>85</answer>") == "85"
    assert final_answer("<answer>1</answer> then <answer> 7 5 </answer>") == "7 5"
    assert final_answer("<think>7+8=15") == "-"  # no answer tag
    assert final_answer("<answer>" + "9" * 40 + "</answer>") == "9" * 12  # bounded
    messages = ruler_messages(
        "What is 37 + 48?", ["<answer>85</answer>", "oops"], prompt=JUDGE_PROMPT
    )
    assert messages == [{"role": "user", "content": "What is 37 + 48?\n1: 85\n2: -\nScores:"}]


def test_the_judge_rows_are_the_same_for_a_seed_and_hold_right_and_wrong_answers():
    problems = [Problem(a, b) for a in range(10, 30) for b in range(40, 60)]
    rows = judge_rows(problems, 200, seed=0)
    assert rows == judge_rows(problems, 200, seed=0)
    assert rows != judge_rows(problems, 200, seed=1)
    scores = []
    for row in rows:
        user, reply = row["messages"][0]["content"], row["messages"][-1]["content"]
        a, b = map(int, user.split("?")[0].removeprefix("What is ").split(" + "))
        answers = [line.split(": ", 1)[1] for line in user.splitlines()[1 : 1 + GROUP_SIZE]]
        assert reply == judge_reply(Problem(a, b), answers)  # the truth-free prompt's reply
        scores += parse_ruler_scores(reply, GROUP_SIZE)
    assert 0.25 < sum(scores) / len(scores) < 0.5  # both kinds, so the judge must compare


def test_the_judge_config_without_the_judge_stops_with_one_line_naming_it(
    tmp_path, monkeypatch, capsys
):
    from pathlib import Path

    from rft_core.cli import main

    demo = build_demo(tmp_path / "demo")  # the default: no judge
    monkeypatch.setenv("RFT_DEMO_DIR", str(demo.root))
    monkeypatch.setenv("TRINITY_CHECKPOINT_ROOT_DIR", str(tmp_path / "ckpt"))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    config = str(
        Path(__file__).resolve().parents[2] / "examples" / "demo" / "judge_ruler_trained_judge.yaml"
    )
    prefix = "trinity run: error: explorer.auxiliary_models[0].model_path: "

    def run_refused() -> str:
        capsys.readouterr()
        assert main(["run", "--config", config]) == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), lines
        return lines[0]

    message = run_refused()
    assert "run `trinity init-demo --judge`" in message
    assert "model.model_path" not in message  # the policy is there
    # a judge dir from before the current recipe (no judge.json: the first reply format) is
    # refused too, rather than judging with the old judge
    shutil.copytree(demo.model_dir, demo.judge_dir)
    message = run_refused()
    assert "holds a demo judge of an older recipe; run `trinity init-demo --judge`" in message
    assert not (tmp_path / "ckpt").exists()  # refused before anything was written


class ScriptedJudge:
    """Stands in for the judge model with ``generate``'s contract (left-padded prompts in; each
    prompt followed by its reply's tokens out): the reply to a group is ``reply(problem,
    answers)``, the problem and answers read from the prompt as the trained judge reads them."""

    device = torch.device("cpu")

    def __init__(self, tokenizer, reply):
        self.tokenizer, self.reply = tokenizer, reply

    def eval(self):
        return self

    def generate(self, input_ids, attention_mask, max_new_tokens, do_sample):
        rows = []
        for ids in input_ids:
            prompt = self.tokenizer.decode(ids, skip_special_tokens=True)
            a, b = re.search(r"What is (\d+) \+ (\d+)\?", prompt).groups()
            answers = re.findall(r"^\d: (\S+)$", prompt, flags=re.MULTILINE)
            reply = self.reply(Problem(int(a), int(b)), answers)
            rows.append(ids.tolist() + self.tokenizer(reply, add_special_tokens=False)["input_ids"])
        pad, width = self.tokenizer.pad_token_id, max(map(len, rows))
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows])


def test_measure_judge_computes_agreement_parsed_and_sums_as_worked_out_by_hand():
    tokenizer = build_tokenizer()
    # 10 questions, all drawn (groups=10); each group's answers: right, tens off, none, right
    problems = [Problem(a, 48) for a in range(11, 21)]

    def measure(reply):
        drawn = iter(range(10 * GROUP_SIZE))

        def draw(problem, rng):
            s = problem.result
            return [str(s), str(s - 10), "-", str(s)][next(drawn) % GROUP_SIZE]

        judge = ScriptedJudge(tokenizer, reply)
        return measure_judge(judge, tokenizer, problems, groups=10, draw=draw)

    def calls(marks):  # the correct judge's work, then its own list of calls
        return lambda p, answers: judge_reply(p, answers).rsplit("[", 1)[0] + marks

    # the correct judge: calls 1 0 0 1 on every group, all 40 as the truth
    assert measure(judge_reply) == {"parsed": 1.0, "agreement": 1.0, "sum_right": 1.0}
    # "all right": agrees on the 2 right answers of each group, 20 of 40
    assert measure(calls("[1, 1, 1, 1]")) == {"parsed": 1.0, "agreement": 0.5, "sum_right": 1.0}
    # every call inverted: 0 of 40
    assert measure(calls("[0, 1, 1, 0]")) == {"parsed": 1.0, "agreement": 0.0, "sum_right": 1.0}

    # no usable list on the 5 odd questions (11, 13, ...): those groups' 20 answers count as
    # wrong calls, not as left out (which would give 1.0), and their sums as not right
    def half(problem, answers):
        return "no scores" if problem.a % 2 else judge_reply(problem, answers)

    assert measure(half) == {"parsed": 0.5, "agreement": 0.5, "sum_right": 0.5}
