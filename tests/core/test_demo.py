"""`trinity init-demo`: the tiny model and the synthetic GSM8K-style data it writes."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rft_core.demo import (
    DEMO_FORMAT_VERSION,
    DEMO_MAX_RESPONSE_TOKENS,
    DEMO_SYSTEM_PROMPT,
    MARKER_NAME,
    SLOPPY_CARRY_SHARE,
    TEST_SIZE,
    TRAIN_SIZE,
    DemoPaths,
    build_demo,
    default_demo_dir,
)
from rft_core.errors import DataError


def file_states(root: Path) -> dict[str, tuple[str, int]]:
    """Relative path -> (sha256, mtime_ns) of every file under root."""
    return {
        str(p.relative_to(root)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def hashes(root: Path) -> dict[str, str]:
    return {name: digest for name, (digest, _) in file_states(root).items()}


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> DemoPaths:
    return build_demo(tmp_path_factory.mktemp("demo") / "out", seed=0)


def test_it_writes_the_fixed_layout(demo):
    expected = {
        MARKER_NAME,
        "model/config.json",
        "model/generation_config.json",
        "model/model.safetensors",
        "model/tokenizer.json",
        "model/tokenizer_config.json",
        "model/chat_template.jinja",
        "gsm8k/main/train-00000-of-00001.parquet",
        "gsm8k/main/test-00000-of-00001.parquet",
        "sft/train.jsonl",
        "countdown/main/train-00000-of-00001.parquet",
        "countdown/main/test-00000-of-00001.parquet",
        "frozen_lake/train.jsonl",
        "frozen_lake/test.jsonl",
        "sft/frozen_lake.jsonl",
    }
    assert set(hashes(demo.root)) == expected
    assert json.loads(demo.marker_path.read_text()) == {
        "format": "rft-demo",
        "version": DEMO_FORMAT_VERSION,
        "seed": 0,
    }


def test_model_loads_and_generates_through_the_chat_template(demo):
    tokenizer = AutoTokenizer.from_pretrained(demo.model_dir)
    model = AutoModelForCausalLM.from_pretrained(demo.model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 1_000_000 < n_params < 10_000_000
    assert model.config.model_type == "qwen2"
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|endoftext|>"

    messages = [
        {"role": "system", "content": DEMO_SYSTEM_PROMPT},
        {"role": "user", "content": "What is 37 + 48?"},
    ]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == (
        f"<|im_start|>system\n{DEMO_SYSTEM_PROMPT}<|im_end|>\n"
        "<|im_start|>user\nWhat is 37 + 48?<|im_end|>\n<|im_start|>assistant\n"
    )
    inputs = tokenizer(text, return_tensors="pt")
    torch.manual_seed(0)
    out = model.generate(**inputs, max_new_tokens=12, do_sample=True, min_new_tokens=12)
    new_tokens = out[0, inputs["input_ids"].shape[1] :]
    assert len(new_tokens) == 12
    assert all(0 <= t < len(tokenizer) for t in new_tokens.tolist())
    assert isinstance(tokenizer.decode(new_tokens), str)


def test_tokenizer_is_one_token_per_ascii_char_and_round_trips(demo):
    tokenizer = AutoTokenizer.from_pretrained(demo.model_dir)
    text = "<think>37+48=85</think><answer>85</answer>\nQ: a/b (x), ~!"
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text)
    assert tokenizer.decode(ids) == text
    # special tokens are single ids; non-ASCII text survives as bytes
    assert len(tokenizer("<|im_start|>user<|im_end|>")["input_ids"]) == 6
    assert tokenizer.decode(tokenizer("café €")["input_ids"]) == "café €"


def test_parquet_splits_have_question_answer_columns_with_correct_truths(demo):
    rows = {}
    for split, path, size in (
        ("train", demo.train_path, TRAIN_SIZE),
        ("test", demo.test_path, TEST_SIZE),
    ):
        table = pq.read_table(path)
        assert table.column_names == ["question", "answer"]
        assert table.num_rows == size
        rows[split] = table.to_pylist()
    for row in rows["train"] + rows["test"]:
        a, b = re.fullmatch(r"What is (\d\d) \+ (\d\d)\?", row["question"]).groups()
        assert row["answer"].splitlines()[-1] == f"#### {int(a) + int(b)}"
    train_questions = {r["question"] for r in rows["train"]}
    assert not train_questions & {r["question"] for r in rows["test"]}
    assert len(train_questions) == TRAIN_SIZE


def test_countdown_games_are_solvable_and_score_one_with_countdown_reward(demo):
    import itertools

    import pyarrow.parquet as pq

    from rft_core import rewards

    train = pq.read_table(demo.countdown_train_path).to_pylist()
    test = pq.read_table(demo.countdown_test_path).to_pylist()
    assert (len(train), len(test)) == (512, 64)
    for row in test:
        truth = json.loads(row["answer"])
        numbers, target = truth["numbers"], truth["target"]
        assert len(numbers) == 3 and all(1 <= n <= 9 for n in numbers) and target > 0
        assert row["question"] == (
            f"Use {numbers[0]}, {numbers[1]}, {numbers[2]} once each with + - * / to make {target}."
        )
        # some order and two of + - * reach the target: that equation scores 1.0
        scores = [
            rewards.score(
                "countdown_reward", f"<answer>({a} {x} {b}) {y} {c}</answer>", row["answer"]
            )
            for a, b, c in itertools.permutations(numbers)
            for x, y in itertools.product("+-*", repeat=2)
        ]
        assert {"score": 1.0} in scores


def test_sft_rows_are_the_train_split_answered_by_the_sloppy_teacher(demo):
    lines = demo.sft_path.read_text().splitlines()
    assert len(lines) == TRAIN_SIZE
    train = {r["question"]: r["answer"] for r in pq.read_table(demo.train_path).to_pylist()}
    carry_rows = dropped = 0
    for line in lines:
        system, user, assistant = json.loads(line)["messages"]
        assert (system["role"], system["content"]) == ("system", DEMO_SYSTEM_PROMPT)
        assert user["role"] == "user" and assistant["role"] == "assistant"
        a1, a0, b1, b0 = map(
            int, re.fullmatch(r"What is (\d)(\d) \+ (\d)(\d)\?", user["content"]).groups()
        )
        steps = re.fullmatch(
            r"<think>(\d)\+(\d)=(\d+) (\d)\+(\d)\+([01])=(\d+)</think><answer>(\d+)</answer>",
            assistant["content"],
        )
        x0, y0, ones, x1, y1, carry, tens, answer = map(int, steps.groups())
        # ones, then tens with the carry as written, then the answer those steps give
        assert (x0, y0, ones) == (a0, b0, a0 + b0)
        assert (x1, y1, tens) == (a1, b1, a1 + b1 + carry)
        assert answer == tens * 10 + ones % 10
        truth = int(train[user["content"]].rsplit("#### ", 1)[1])
        assert truth == (a1 * 10 + a0) + (b1 * 10 + b0)
        if ones >= 10:
            carry_rows += 1
            dropped += carry == 0
            assert (answer == truth) == (carry == 1)  # a dropped carry is exactly 10 short
        else:
            assert carry == 0 and answer == truth  # the teacher errs only on carries
        assert len(assistant["content"]) + 1 <= DEMO_MAX_RESPONSE_TOKENS
    # the teacher drops more than half of the carries (so imitation drops them), not all of them
    # (so sampling still finds them): 1086 of 1806 with seed 0
    assert (carry_rows, dropped) == (1806, 1086)
    assert abs(dropped / carry_rows - SLOPPY_CARRY_SHARE) < 0.01


def test_same_seed_gives_the_same_bytes_and_another_seed_differs(demo, tmp_path):
    again = build_demo(tmp_path / "again", seed=0)
    assert hashes(again.root) == hashes(demo.root)
    other = hashes(build_demo(tmp_path / "other", seed=1).root)
    for name in (
        "model/model.safetensors",
        "gsm8k/main/train-00000-of-00001.parquet",
        "sft/train.jsonl",
    ):
        assert other[name] != hashes(demo.root)[name]
    assert other["model/tokenizer.json"] == hashes(demo.root)["model/tokenizer.json"]


def test_rerun_changes_no_file_and_restores_a_missing_one(demo):
    before = file_states(demo.root)
    build_demo(demo.root, seed=0)
    assert file_states(demo.root) == before

    demo.test_path.unlink()
    (demo.model_dir / "model.safetensors").unlink()
    build_demo(demo.root, seed=0)
    after = file_states(demo.root)
    assert hashes(demo.root) == {name: digest for name, (digest, _) in before.items()}
    untouched = set(before) - {"gsm8k/main/test-00000-of-00001.parquet", "model/model.safetensors"}
    assert {n: after[n] for n in untouched} == {n: before[n] for n in untouched}
    assert not [p for p in demo.root.rglob(".*") if p.name != MARKER_NAME]  # no temp files left


def test_it_refuses_a_foreign_non_empty_dir_unless_forced(tmp_path):
    foreign = tmp_path / "project"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=re.escape(str(foreign)) + ".*--force"):
        build_demo(foreign)
    assert [p.name for p in foreign.iterdir()] == ["notes.txt"]

    paths = build_demo(foreign, force=True)
    assert (foreign / "notes.txt").read_text() == "mine"
    assert paths.sft_path.is_file() and paths.marker_path.is_file()


def test_it_refuses_a_demo_dir_of_another_seed_unless_forced(demo, tmp_path):
    with pytest.raises(DataError, match="seed 0.*--force"):
        build_demo(demo.root, seed=3)
    assert json.loads(demo.marker_path.read_text())["seed"] == 0


def test_a_demo_dir_of_an_older_format_version_is_rebuilt(tmp_path):
    fresh = hashes(build_demo(tmp_path / "fresh").root)
    old = build_demo(tmp_path / "old")
    old.sft_path.write_text('{"messages": []}\n')  # what an older version wrote
    old.marker_path.write_text(json.dumps({"format": "rft-demo", "version": 1, "seed": 0}))
    build_demo(old.root)
    assert hashes(old.root) == fresh


def test_default_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("RFT_DEMO_DIR", str(tmp_path / "d"))
    assert default_demo_dir() == tmp_path / "d"
    monkeypatch.delenv("RFT_DEMO_DIR")
    monkeypatch.chdir(tmp_path)
    assert default_demo_dir() == tmp_path / "var" / "demo"


def trinity(*args: str) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("trinity")
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300)


def test_cli_builds_the_demo_and_exits_zero(demo, tmp_path):
    result = trinity("init-demo", "--out", str(tmp_path / "cli"))
    assert result.returncode == 0, result.stderr
    assert str(tmp_path / "cli" / "model") in result.stdout
    assert hashes(tmp_path / "cli") == hashes(demo.root)


def test_cli_refuses_a_foreign_dir_with_one_line_and_non_zero_exit(tmp_path):
    (tmp_path / "data.csv").write_text("a,b\n")
    result = trinity("init-demo", "--out", str(tmp_path))
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("trinity init-demo: error:") and str(tmp_path) in lines[0]
