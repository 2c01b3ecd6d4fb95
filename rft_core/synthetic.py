"""A random model of a real model's shape and a GSM8K-shaped synthetic taskset: what the product
is measured on when nothing can be downloaded (the GPU machine has no network).

    trinity init-demo --synthetic qwen2.5-1.5b [--out DIR] [--seed N] [--force]

writes::

    DIR/.rft_synthetic.json                       marker: shape, seed, sizes
    DIR/model/                                    random weights of the shape (bf16 safetensors)
        config.json generation_config.json model.safetensors tokenizer.json tokenizer_config.json
    DIR/gsm8k/main/train-00000-of-00001.parquet   question / answer, answers end in "#### N"
    DIR/gsm8k/main/test-00000-of-00001.parquet

The shapes (``SHAPES``) live here once: ``qwen2.5-1.5b`` is Qwen2.5-1.5B(-Instruct)'s
published ``config.json`` (hidden 1536, 28 layers, 12 query heads over 2 KV heads, MLP 8960,
vocabulary 151,936, tied embeddings), ``smoke`` the same vocabulary on a 2-layer, hidden-64 body
(a CPU test's size; ``benchmarks/gpu_grpo.py --tiny`` uses it too).

The tokenizer is byte-level with no merges over the whole vocabulary (``byte_tokenizer``:
``AutoTokenizer`` builds transformers' Qwen2 tokenizer for a qwen2 model, and that one loads it):
one token per ASCII character, every id decodable (a random model samples all of them). A
question is a word problem padded to ``prompt_tokens`` characters, so its prompt (the chat
template joins the messages' contents) is exactly ``prompt_tokens`` tokens, the length the
benchmark uses; its answer is a GSM8K-style worked line ending in ``#### N``. A random model never writes the answer: rewards are 0, which
changes nothing a step costs (the trainer steps on every batch; advantages are just zero).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from itertools import product
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rft_core.errors import DataError

# Qwen2.5-1.5B-Instruct's config.json (the architecture; the weights here are random)
QWEN25_1P5B = dict(
    vocab_size=151936,
    hidden_size=1536,
    intermediate_size=8960,
    num_hidden_layers=28,
    num_attention_heads=12,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    hidden_act="silu",
    bos_token_id=151643,
    eos_token_id=151645,
)
# a smoke run's size, Qwen2.5's vocabulary kept (so the tokenizer and the ids are the same)
SMOKE = dict(
    QWEN25_1P5B,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
)
SHAPES = {"qwen2.5-1.5b": QWEN25_1P5B, "smoke": SMOKE}
EOS_ID, PAD_ID = 151645, 151643

MARKER_NAME = ".rft_synthetic.json"
TRAIN_TASKS = 1024  # 32 a step: 32 steps of one epoch
TEST_TASKS = 32
PROMPT_TOKENS = 128


@dataclass(frozen=True)
class SyntheticPaths:
    root: Path
    model_dir: Path
    dataset_dir: Path  # taskset `path`, `subset_name: main`, splits train / test
    marker_path: Path

    @classmethod
    def under(cls, root: Path) -> SyntheticPaths:
        root = Path(root)
        return cls(root, root / "model", root / "gsm8k", root / MARKER_NAME)


def word_tokenizer(vocab_size: int) -> Any:
    """Token ``i`` is the word ``t<i>`` (whitespace-split); EOS and pad are Qwen2.5's ids."""

    vocab = {f"t{i}": i for i in range(vocab_size)}
    words = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
    words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, eos_token=f"t{EOS_ID}", pad_token=f"t{PAD_ID}", unk_token="t0"
    )
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
    return tokenizer


def byte_tokenizer(vocab_size: int) -> Any:
    """A byte-level BPE tokenizer with no merges over ``vocab_size`` ids, which transformers'
    ``Qwen2Tokenizer`` (what ``AutoTokenizer`` builds for a qwen2 model) loads as it is: ids
    0-255 are the 256 bytes (one token per ASCII character), 151,643-151,645 Qwen2.5's
    ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, every other id a two- or three-byte
    token that no text encodes to but that decodes (a random model samples every id)."""

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    specials = {PAD_ID: "<|endoftext|>", PAD_ID + 1: "<|im_start|>", EOS_ID: "<|im_end|>"}
    fillers = ("".join(p) for n in (2, 3) for p in product(alphabet, repeat=n))
    vocab: dict[str, int] = {}
    for i in range(vocab_size):
        token = alphabet[i] if i < len(alphabet) else specials.get(i) or next(fillers)
        vocab[token] = i
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in specials.values()]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token=specials[EOS_ID], pad_token=specials[PAD_ID]
    )
    # the prompt is the messages' contents: a question of N characters is N tokens
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    return tokenizer


def write_model(
    directory: Path, shape: dict[str, Any], seed: int, device: str = "cpu", words: bool = False
) -> Path:
    """A random Qwen2 model of ``shape`` in bf16 safetensors, with :func:`byte_tokenizer`
    (``words``: :func:`word_tokenizer`, for callers that pass token ids and never text, and
    load it as ``PreTrainedTokenizerFast``: ``AutoTokenizer`` would rebuild Qwen2's)."""

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config = Qwen2Config(**shape, dtype="bfloat16")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.generation_config = GenerationConfig(eos_token_id=EOS_ID, pad_token_id=PAD_ID)
    model.save_pretrained(directory, safe_serialization=True)
    make = word_tokenizer if words else byte_tokenizer
    make(config.vocab_size).save_pretrained(directory)
    return directory


def task_rows(count: int, prompt_tokens: int, seed: int) -> list[dict[str, str]]:
    """``count`` GSM8K-shaped rows: a word problem of exactly ``prompt_tokens`` ASCII
    characters (so as many tokens) and its answer ``... #### N``."""
    rng = random.Random(seed)
    names = ("Ann", "Ben", "Cara", "Dev", "Eli", "Fay", "Gus", "Hal")
    things = ("apples", "books", "coins", "pens", "shells", "cards")
    rows = []
    for _ in range(count):
        a, b = rng.randrange(10, 100), rng.randrange(10, 100)
        who, thing = rng.choice(names), rng.choice(things)
        question = f"{who} has {a} {thing} and gets {b} more. How many {thing} now?"
        filler = " Think it through."
        while len(question) < prompt_tokens:
            question += filler[: prompt_tokens - len(question)]
        answer = f"{who} has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} {thing}.\n#### {a + b}"
        rows.append({"question": question[:prompt_tokens], "answer": answer})
    return rows


def _write_parquet(path: Path, rows: list[dict[str, str]]) -> None:

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table(
        {
            "question": pa.array([r["question"] for r in rows], pa.string()),
            "answer": pa.array([r["answer"] for r in rows], pa.string()),
        }
    )
    pq.write_table(table, path)


def build_synthetic(
    out_dir: Path,
    shape_name: str = "qwen2.5-1.5b",
    *,
    seed: int = 0,
    force: bool = False,
    train_tasks: int = TRAIN_TASKS,
    test_tasks: int = TEST_TASKS,
    prompt_tokens: int = PROMPT_TOKENS,
    device: str | None = None,
) -> SyntheticPaths:
    """Write the model and the taskset under ``out_dir``; a directory holding the same build
    (its marker says so) is kept as it is. ``device``: where the random weights are drawn
    (default: CUDA when there is one; a 1.5B model draws in seconds there)."""
    if shape_name not in SHAPES:
        raise DataError(f"--synthetic {shape_name!r}: use one of {', '.join(SHAPES)}")
    paths = SyntheticPaths.under(Path(out_dir))
    shape = SHAPES[shape_name]
    marker = {
        "format": "rft-synthetic",
        "shape": shape_name,
        "seed": seed,
        "train_tasks": train_tasks,
        "test_tasks": test_tasks,
        "prompt_tokens": prompt_tokens,
    }
    root = paths.root
    if root.exists() and not root.is_dir():
        raise DataError(f"{root} is a file, not a directory; choose another --out")
    if paths.marker_path.is_file() and not force:
        if json.loads(paths.marker_path.read_text()) == marker:
            return paths
        raise DataError(
            f"{root} holds another synthetic build ({paths.marker_path}); pass --force to "
            "rebuild it or choose another --out"
        )
    if root.is_dir() and any(root.iterdir()) and not force and not paths.marker_path.exists():
        raise DataError(
            f"{root} is not empty and holds no synthetic build (no {MARKER_NAME}); choose an "
            "empty or new directory with --out, or pass --force to write into it"
        )
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    paths.marker_path.unlink(missing_ok=True)  # an interrupted rebuild is never taken as done
    write_model(paths.model_dir, shape, seed, device)
    main = paths.dataset_dir / "main"
    rows = task_rows(train_tasks + test_tasks, prompt_tokens, seed)
    _write_parquet(main / "train-00000-of-00001.parquet", rows[:train_tasks])
    _write_parquet(main / "test-00000-of-00001.parquet", rows[train_tasks:])
    paths.marker_path.write_text(json.dumps(marker) + "\n")
    return paths


def cli_synthetic(out: Path, shape_name: str, seed: int, force: bool) -> int:
    paths = build_synthetic(out, shape_name, seed=seed, force=force)
    print(f"synthetic {shape_name} ready in {paths.root}")
    print(f"  model:   {paths.model_dir}")
    print(f"  taskset: {paths.dataset_dir} (subset main, splits train/test)")
    return 0
