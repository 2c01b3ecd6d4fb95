"""The embedded default: a tiny model and a synthetic GSM8K-style task that learn in minutes on CPU.

``trinity init-demo [--out DIR] [--seed N] [--force]`` writes, with no download and the same
bytes for the same seed::

    DIR/.rft_demo.json                         marker: format version and seed
    DIR/model/                                 a Hugging Face model directory
        config.json generation_config.json model.safetensors
        tokenizer.json tokenizer_config.json chat_template.jinja
    DIR/gsm8k/main/train-00000-of-00001.parquet  question/answer, answers end in "#### N"
    DIR/gsm8k/main/test-00000-of-00001.parquet   (laid out as `huggingface-cli download openai/gsm8k`)
    DIR/sft/train.jsonl                        messages rows for the SFT warmup stage
    DIR/countdown/main/{train,test}-00000-of-00001.parquet  Countdown games: question, answer
                                               (JSON {"target", "numbers"}; countdown_reward)
    DIR/frozen_lake/{train,test}.jsonl         3x3 lakes for frozen_lake_workflow, and
    DIR/sft/frozen_lake.jsonl                  its multi-turn warmup (``rft_core.demo_frozen_lake``)
    DIR/judge/                                 the demo judge: the demo model trained on the CPU
                                               to judge the arithmetic answers (``rft_core.demo_judge``;
                                               ``judge=True``: ``trinity init-demo --judge``)

The model is a randomly initialised Qwen2-architecture causal LM of ~3M parameters with a
byte-level tokenizer that has no merges (one token per ASCII character) and a ChatML chat
template, so every tool that loads Qwen2.5 loads it too.

The task is 2-digit addition ("What is 37 + 48?"); the SFT rows answer it digit by digit,
``<think>7+8=15 3+4+1=8</think><answer>85</answer>``, from a *sloppy teacher*: in 60% of the rows
whose ones carry (drawn once with the seed), the teacher leaves the carry out
(``<think>7+8=15 3+4+0=7</think><answer>75</answer>``). Imitation then learns to drop the carry
more often than not, so the warmup's greedy answers miss most carry questions (about 45% of
them) whatever the CPU's kernels make of the finer digits, while sampling at temperature 1 still
writes the carry often enough for GRPO's correctness reward to find it. That is the demo's point
and its headroom: RL fixes what the imitation data got wrong. Measured with the demo config
(SFT 500 x 8 at lr 1e-3 with a cosine decay, then GRPO 30 x 8 tasks x 8 samples at lr 3e-5;
README and tests/core/test_demo_learning.py give the figures per CPU kernel path): held-out
greedy accuracy 0.53-0.60 after the warmup, +0.32 to +0.44 after 30 GRPO steps. With the correct teacher only, the
warmup landed anywhere from 0.61 to 0.84 depending on the CPU's kernels (300 steps sit on the
steep part of the SFT curve: ~10% / 30% / 40% / 60% / 75% after 200 / 250 / 300 / 350 / 400 steps
in a plain fp32 loop), and from 0.84 GRPO had 0.05 left to gain. Without the digit-wise steps
the same model stayed under 10% after 400 SFT steps.

Re-running is idempotent: files that exist are kept untouched, missing ones are written (each
through a temporary file and a rename, so an interrupted build never leaves a truncated file).
A non-empty directory without the marker is refused unless ``force``; ``force`` rewrites every
demo file (other files in the directory are left alone), and so does a marker written by an
older ``DEMO_FORMAT_VERSION``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GenerationConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from rft_core import demo_frozen_lake as frozen_lake
from rft_core.demo_judge import JUDGE_RECIPE, JUDGE_STAMP, judge_is_current, train_judge
from rft_core.errors import DataError
from rft_core.synthetic import cli_synthetic

DEMO_FORMAT_VERSION = 3  # bump when the files' content changes: older demo dirs are rebuilt
MARKER_NAME = ".rft_demo.json"

# The demo config repeats this string as the taskset's `format.system_prompt`; the SFT rows use
# it too, so the GRPO prompts look exactly like the warmup prompts. Short on purpose: every
# character is a token for this model.
DEMO_SYSTEM_PROMPT = "Think, then answer."

TRAIN_SIZE = 4000
TEST_SIZE = 300
# Longest SFT response is 50 characters plus <|im_end|>; the rendered prompt is 64 tokens.
DEMO_MAX_RESPONSE_TOKENS = 64
# The warmup's sloppy teacher leaves the carry out of this share of the SFT rows whose ones carry
# (the module docstring says why): above one half, so the imitated greedy answer drops it.
SLOPPY_CARRY_SHARE = 0.6

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]

# Qwen2.5's ChatML layout, without its default system prompt (tokens are dear at one per char).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# hidden 256, 4 layers, 4 query heads over 2 kv heads: ~3M parameters (11.9 MB in fp32).
MODEL_SHAPE = dict(
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=True,
    rope_theta=10000.0,
)

MODEL_FILES = (
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)


@dataclass(frozen=True)
class DemoPaths:
    """Where the demo's parts live under one output directory (the layout is fixed)."""

    root: Path
    model_dir: Path  # Hugging Face model directory (`model.model_path`)
    dataset_dir: Path  # GSM8K-style dataset directory (taskset `path`, `subset_name: main`)
    train_path: Path  # dataset_dir/main/train-00000-of-00001.parquet
    test_path: Path  # dataset_dir/main/test-00000-of-00001.parquet
    sft_path: Path  # messages-format jsonl for the SFT warmup stage
    marker_path: Path
    countdown_dir: Path  # Countdown taskset directory (question/answer, `subset_name: main`)
    countdown_train_path: Path
    countdown_test_path: Path
    frozen_lake_dir: Path  # train.jsonl / test.jsonl lakes for frozen_lake_workflow
    frozen_lake_sft_path: Path  # multi-turn messages rows for its SFT warmup
    judge_dir: (
        Path  # the demo judge (Hugging Face model directory) of judge_ruler_trained_judge.yaml
    )

    @classmethod
    def under(cls, root: Path) -> DemoPaths:
        root = Path(root)
        dataset_dir = root / "gsm8k"
        return cls(
            root=root,
            model_dir=root / "model",
            dataset_dir=dataset_dir,
            train_path=dataset_dir / "main" / "train-00000-of-00001.parquet",
            test_path=dataset_dir / "main" / "test-00000-of-00001.parquet",
            sft_path=root / "sft" / "train.jsonl",
            marker_path=root / MARKER_NAME,
            countdown_dir=root / "countdown",
            countdown_train_path=root / "countdown" / "main" / "train-00000-of-00001.parquet",
            countdown_test_path=root / "countdown" / "main" / "test-00000-of-00001.parquet",
            frozen_lake_dir=root / "frozen_lake",
            frozen_lake_sft_path=root / "sft" / "frozen_lake.jsonl",
            judge_dir=root / "judge",
        )


def default_demo_dir() -> Path:
    """``$RFT_DEMO_DIR`` when set, else ``./var/demo`` under the current directory."""
    env = os.environ.get("RFT_DEMO_DIR")
    return Path(env).expanduser() if env else Path.cwd() / "var" / "demo"


# ---------------------------------------------------------------------------------------------
# The task
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One 2-digit addition ``a + b``."""

    a: int
    b: int

    @property
    def result(self) -> int:
        return self.a + self.b

    @property
    def carry(self) -> int:
        return (self.a % 10 + self.b % 10) // 10

    @property
    def question(self) -> str:
        return f"What is {self.a} + {self.b}?"

    @property
    def gsm8k_answer(self) -> str:
        """A worked solution with GSM8K's calculator annotations, then ``#### N``."""
        (a1, a0), (b1, b0), c = divmod(self.a, 10), divmod(self.b, 10), self.carry
        return (
            f"Ones: {a0} + {b0} = <<{a0}+{b0}={a0 + b0}>>{a0 + b0}.\n"
            f"Tens with the carry: {a1} + {b1} + {c} = <<{a1}+{b1}+{c}={a1 + b1 + c}>>{a1 + b1 + c}.\n"
            f"#### {self.result}"
        )

    @property
    def completion(self) -> str:
        """The response the SFT warmup teaches: ones, then tens with the carry, then the answer.

        The digit-wise steps are what make the task learnable in minutes: with the bare
        ``<think>37+48=85</think>`` a 3M model was at 5-9% held-out accuracy after 400 steps
        of batch 64, with the steps at 76% (see the module docstring).
        """
        (a1, a0), (b1, b0), c = divmod(self.a, 10), divmod(self.b, 10), self.carry
        return (
            f"<think>{a0}+{b0}={a0 + b0} {a1}+{b1}+{c}={a1 + b1 + c}</think>"
            f"<answer>{self.result}</answer>"
        )

    @property
    def completion_without_carry(self) -> str:
        """The sloppy teacher's answer: the same steps with the carry left out of the tens."""
        (a1, a0), (b1, b0) = divmod(self.a, 10), divmod(self.b, 10)
        tens, ones = a1 + b1, (a0 + b0) % 10
        return f"<think>{a0}+{b0}={a0 + b0} {a1}+{b1}+0={tens}</think><answer>{tens * 10 + ones}</answer>"


def all_problems() -> list[Problem]:
    """Every addition of two 2-digit numbers (8100 problems)."""
    return [Problem(a, b) for a in range(10, 100) for b in range(10, 100)]


def split_problems(seed: int) -> tuple[list[Problem], list[Problem]]:
    """Disjoint (train, test) samples of :func:`all_problems`, drawn with ``seed``."""
    drawn = random.Random(seed).sample(all_problems(), TRAIN_SIZE + TEST_SIZE)
    return drawn[:TRAIN_SIZE], drawn[TRAIN_SIZE:]


COUNTDOWN_TRAIN_SIZE = 512
COUNTDOWN_TEST_SIZE = 64


def countdown_problems(seed: int, count: int) -> list[tuple[list[int], int]]:
    """``count`` Countdown games ``(numbers, target)``: three digits 1-9 and the value of
    ``a op b op c`` (``+ - *``, left to right) for a random order and ops, kept when positive,
    so every game has a solution. The same ``seed`` gives the same games."""
    rng = random.Random(f"countdown-{seed}")
    games: list[tuple[list[int], int]] = []
    while len(games) < count:
        numbers = [rng.randint(1, 9) for _ in range(3)]
        a, b, c = rng.sample(numbers, 3)
        first, second = rng.choice("+-*"), rng.choice("+-*")
        target = eval_left_to_right(eval_left_to_right(a, first, b), second, c)
        if target > 0:
            games.append((numbers, target))
    return games


def eval_left_to_right(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y if op == "-" else x * y


def countdown_question(numbers: list[int], target: int) -> str:
    """A short instruction (every character is a token for the demo model)."""
    listed = ", ".join(str(n) for n in numbers)
    return f"Use {listed} once each with + - * / to make {target}."


def sft_rows(train: list[Problem], seed: int) -> list[dict]:
    """The warmup's messages rows: the sloppy teacher's answer to each train problem, in order."""
    draw = random.Random(f"sloppy-{seed}")
    # one draw per carry row, in train order: the same seed gives the same rows
    return [
        sft_row(
            p,
            p.completion_without_carry
            if p.carry and draw.random() < SLOPPY_CARRY_SHARE
            else p.completion,
        )
        for p in train
    ]


def sft_row(problem: Problem, answer: str) -> dict:
    return {
        "messages": [
            {"role": "system", "content": DEMO_SYSTEM_PROMPT},
            {"role": "user", "content": problem.question},
            {"role": "assistant", "content": answer},
        ]
    }


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------


def build_tokenizer() -> PreTrainedTokenizerBase:
    """A byte-level BPE tokenizer with no merges (one token per ASCII char) and ChatML."""

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for char in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[char] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        model_max_length=MODEL_SHAPE["max_position_embeddings"],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def build_model(tokenizer: PreTrainedTokenizerBase, seed: int) -> PreTrainedModel:
    """A randomly initialised Qwen2 causal LM sized for :func:`build_tokenizer`'s vocabulary."""

    eos, pad = tokenizer.convert_tokens_to_ids(IM_END), tokenizer.convert_tokens_to_ids(ENDOFTEXT)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        eos_token_id=eos,
        pad_token_id=pad,
        bos_token_id=None,
        **MODEL_SHAPE,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[eos, pad], pad_token_id=pad, bos_token_id=None
    )
    return model


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def build_demo(
    out_dir: Path, *, seed: int = 0, force: bool = False, judge: bool = False
) -> DemoPaths:
    """Write the demo under ``out_dir`` (missing files only, or every demo file with ``force``).

    ``judge``: also train the demo judge (``rft_core.demo_judge``: minutes of training on the
    CPU, so off unless asked for; only ``examples/demo/judge_ruler_trained_judge.yaml`` needs it). A judge
    dir whose ``judge.json`` names another recipe than ``demo_judge.JUDGE_RECIPE`` is rebuilt.

    Raises DataError when ``out_dir`` is a non-empty directory that is not a demo directory, or
    a demo directory built with another seed, and ``force`` is not set.
    """
    paths = DemoPaths.under(Path(out_dir))
    rewrite = _check_target(paths, seed, force)
    paths.root.mkdir(parents=True, exist_ok=True)
    marker = json.dumps({"format": "rft-demo", "version": DEMO_FORMAT_VERSION, "seed": seed})

    def write_marker(path: Path) -> None:
        path.write_text(marker + "\n")

    if not rewrite:
        # first: a build interrupted halfway is still recognised as ours and completed
        _install(paths.marker_path, write_marker, overwrite=False)

    train, test = split_problems(seed)
    _install_dir(paths.model_dir, MODEL_FILES, lambda d: _write_model(d, seed), rewrite)
    _install(paths.train_path, lambda p: _write_parquet(p, train), rewrite)
    _install(paths.test_path, lambda p: _write_parquet(p, test), rewrite)
    _install(paths.sft_path, lambda p: _write_jsonl(p, sft_rows(train, seed)), rewrite)
    games = countdown_problems(seed, COUNTDOWN_TRAIN_SIZE + COUNTDOWN_TEST_SIZE)
    for path, part in (
        (paths.countdown_train_path, games[:COUNTDOWN_TRAIN_SIZE]),
        (paths.countdown_test_path, games[COUNTDOWN_TRAIN_SIZE:]),
    ):
        _install(path, lambda p, part=part: _write_countdown_parquet(p, part), rewrite)
    lakes_train, lakes_test = frozen_lake.lake_seeds(seed)
    lakes = paths.frozen_lake_dir
    _install(
        lakes / "train.jsonl",
        lambda p: _write_jsonl(p, frozen_lake.taskset_rows(lakes_train)),
        rewrite,
    )
    _install(
        lakes / "test.jsonl",
        lambda p: _write_jsonl(p, frozen_lake.taskset_rows(lakes_test)),
        rewrite,
    )
    _install(
        paths.frozen_lake_sft_path,
        lambda p: _write_jsonl(p, frozen_lake.sft_rows(seed)),
        rewrite,
    )
    if judge:

        def train_judge_into(d: Path) -> None:
            train_judge(
                d,
                train,
                seed,
                build_tokenizer=build_tokenizer,
                build_model=build_model,
                save_model=_save_model,
            )
            (d / JUDGE_STAMP).write_text(json.dumps({"recipe": JUDGE_RECIPE}) + "\n")

        # a judge of an older recipe (another reply format or training) is trained again
        stale = not judge_is_current(paths.judge_dir)
        _install_dir(
            paths.judge_dir, (*MODEL_FILES, JUDGE_STAMP), train_judge_into, rewrite or stale
        )
    # last when rewriting: a rebuild interrupted halfway still carries the old marker, is redone
    _install(paths.marker_path, write_marker, overwrite=rewrite)
    return paths


def demo_judge_problem(path: Path) -> str | None:
    """The run's check of an auxiliary model where ``trinity init-demo --judge`` puts the demo
    judge (``judge`` in a demo directory, or in one not built yet): it is built on request, and
    one of an older :data:`~rft_core.demo_judge.JUDGE_RECIPE` is refused. None elsewhere."""
    parent = path.parent
    if path.name != "judge" or (parent.exists() and not (parent / MARKER_NAME).is_file()):
        return None
    if not (path / "config.json").is_file():
        return (
            "is not a model directory (no config.json); the demo judge is built on request: "
            "run `trinity init-demo --judge`"
        )
    if not judge_is_current(path):
        return "holds a demo judge of an older recipe; run `trinity init-demo --judge` to train the current one"
    return None


def _check_target(paths: DemoPaths, seed: int, force: bool) -> bool:
    """Refuse what must not be written into; return whether existing demo files are rewritten."""
    root = paths.root
    if root.exists() and not root.is_dir():
        raise DataError(f"{root} is a file, not a directory; choose another --out")
    if force:
        return True
    if not root.exists():
        return False
    if paths.marker_path.is_file():
        try:
            info = json.loads(paths.marker_path.read_text())
        except (OSError, ValueError) as err:
            raise DataError(
                f"{paths.marker_path} is unreadable ({err}); pass --force to rebuild"
            ) from err
        if info.get("seed") != seed:
            raise DataError(
                f"{root} holds the demo built with seed {info.get('seed')}; pass "
                f"--seed {info.get('seed')} to keep it or --force to rebuild it with seed {seed}"
            )
        return info.get("version") != DEMO_FORMAT_VERSION  # written by an older rft_core
    if any(root.iterdir()):
        raise DataError(
            f"{root} is not empty and is not a demo directory (no {MARKER_NAME}); "
            "choose an empty or new directory with --out, or pass --force to write into it"
        )
    return False


def _install(dest: Path, write: Callable[[Path], None], overwrite: bool) -> bool:
    """Write ``dest`` through a temporary file and a rename, unless it exists (and not overwrite)."""
    if dest.exists() and not overwrite:
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the demo files are meant to be shared
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


def _install_dir(
    dest: Path, names: tuple[str, ...], write: Callable[[Path], None], overwrite: bool
) -> None:
    """Build a whole directory in a temporary sibling, then move in the files ``dest`` lacks."""
    if not overwrite and all((dest / name).exists() for name in names):
        return
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        write(tmp)
        for name in names:
            if overwrite or not (dest / name).exists():
                os.replace(tmp / name, dest / name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _write_model(directory: Path, seed: int) -> None:
    tokenizer = build_tokenizer()
    _save_model(directory, build_model(tokenizer, seed), tokenizer)


def _save_model(
    directory: Path, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase
) -> None:
    """Save a demo model and its tokenizer as a Hugging Face directory readable by transformers 4."""
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
    # transformers 5 records its own backend class name; 4.x (and vLLM on it) only knows this one
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    for path in directory.iterdir():
        path.chmod(0o644)  # safetensors' writer leaves 0600; the demo files are meant to be shared


def _write_parquet(path: Path, problems: list[Problem]) -> None:

    table = pa.table(
        {
            "question": pa.array([p.question for p in problems], pa.string()),
            "answer": pa.array([p.gsm8k_answer for p in problems], pa.string()),
        }
    )
    pq.write_table(table, path)


def _write_countdown_parquet(path: Path, games: list[tuple[list[int], int]]) -> None:
    """Trinity's Countdown taskset form: ``question`` and the JSON truth in ``answer``."""

    table = pa.table(
        {
            "question": pa.array([countdown_question(n, t) for n, t in games], pa.string()),
            "answer": pa.array(
                [json.dumps({"target": t, "numbers": n}) for n, t in games], pa.string()
            ),
        }
    )
    pq.write_table(table, path)


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def cli_init_demo(args: argparse.Namespace) -> int:
    """``trinity init-demo``: build the demo and print where its parts are (``--synthetic``:
    the random model and taskset of ``rft_core.synthetic`` instead)."""
    if getattr(args, "synthetic", None):
        env = os.environ.get("RFT_SYNTHETIC_DIR")
        default = Path(env).expanduser() if env else Path.cwd() / "var" / "synthetic"
        out = Path(args.out).expanduser() if args.out else default
        return cli_synthetic(out, args.synthetic, args.seed, args.force)
    out = Path(args.out).expanduser() if args.out else default_demo_dir()
    judge = bool(getattr(args, "judge", False))
    if judge and not (DemoPaths.under(out).judge_dir / "model.safetensors").exists():
        print("training the demo judge on the CPU ...")
    paths = build_demo(out, seed=args.seed, force=args.force, judge=judge)
    print(f"demo ready in {paths.root}")
    print(f"  model:    {paths.model_dir}")
    print(f"  taskset:  {paths.dataset_dir} (subset main, splits train/test)")
    print(f"  sft data: {paths.sft_path}")
    print(f"  countdown: {paths.countdown_dir} (subset main, splits train/test)")
    print(
        f"  frozen lake: {paths.frozen_lake_dir} (splits train/test), sft {paths.frozen_lake_sft_path}"
    )
    if judge:
        print(f"  judge:    {paths.judge_dir} (examples/demo/judge_ruler_trained_judge.yaml)")
    return 0
